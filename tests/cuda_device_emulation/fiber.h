// The fibers of the device emulation's block runner: a stack and a switch, nothing else. On x86-64 the switch
// is a few instructions (callee-saved registers, the SSE and x87 control words, the stack pointer), because
// a kernel's warp collectives switch every lane of a warp and ucontext's swapcontext makes a system call each
// time; elsewhere, and under AddressSanitizer (which must see stack switches), swapcontext.
#pragma once

#include <cstddef>

namespace deepinfer::device_emulation {

struct FiberContext;

// A context to switch to and from: the scheduler's (not started) or a fiber's (started by start_fiber).
class Fiber {
 public:
  Fiber();
  ~Fiber();
  Fiber(Fiber&& other) noexcept;
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
  Fiber& operator=(Fiber&&) = delete;
  // Makes this fiber run entry() on `stack` (stack_bytes, 16-byte aligned) at the next switch_to it; entry must
  // never return (it switches away for good).
  void start(void (*entry)(), void* stack, size_t stack_bytes);
  // Saves the running context in `from` and runs `to`.
  static void switch_to(Fiber& from, Fiber& to);

 private:
  FiberContext* context_;
};

}  // namespace deepinfer::device_emulation
