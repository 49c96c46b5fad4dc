// Fiber switching (fiber.h).
#include "fiber.h"

#include <cstdint>

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define DEVEMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

#ifdef DEVEMU_ASM_SWITCH
// devemu_switch(&from_sp, to_sp): pushes the System V callee-saved registers and the MXCSR / x87 control
// words on the running stack, saves its pointer in *from_sp, and pops the same from to_sp's stack.
extern "C" void devemu_switch(void** from_sp, void* to_sp);
asm(R"(
  .text
  .globl devemu_switch
  .type devemu_switch, @function
devemu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size devemu_switch, .-devemu_switch
  .section .note.GNU-stack, "", @progbits
  .text
)");
#endif

namespace deepinfer::device_emulation {

#ifdef DEVEMU_ASM_SWITCH
struct FiberContext {
  void* sp = nullptr;
};

void Fiber::start(void (*entry)(), void* stack, size_t stack_bytes) {
  // The frame devemu_switch pops: control words, six registers, then `entry` as the return address; at entry
  // the stack pointer is 8 past a multiple of 16, as after a call.
  auto* top = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(stack) + stack_bytes) & ~uintptr_t(15));
  uint64_t* sp = top - 11;
  uint32_t mxcsr = 0;
  uint16_t fpcw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  sp[0] = uint64_t(mxcsr) | uint64_t(fpcw) << 32;
  for (int i = 1; i <= 6; ++i) sp[i] = 0;
  sp[7] = reinterpret_cast<uint64_t>(entry);
  sp[8] = 0;  // entry's return address: it never returns
  context_->sp = sp;
}

void Fiber::switch_to(Fiber& from, Fiber& to) { devemu_switch(&from.context_->sp, to.context_->sp); }
#else
struct FiberContext {
  ucontext_t context;
};

void Fiber::start(void (*entry)(), void* stack, size_t stack_bytes) {
  getcontext(&context_->context);
  context_->context.uc_stack.ss_sp = stack;
  context_->context.uc_stack.ss_size = stack_bytes;
  context_->context.uc_link = nullptr;
  makecontext(&context_->context, entry, 0);
}

void Fiber::switch_to(Fiber& from, Fiber& to) { swapcontext(&from.context_->context, &to.context_->context); }
#endif

Fiber::Fiber() : context_(new FiberContext) {}
Fiber::Fiber(Fiber&& other) noexcept : context_(other.context_) { other.context_ = nullptr; }
Fiber::~Fiber() { delete context_; }

}  // namespace deepinfer::device_emulation
