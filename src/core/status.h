// Status / Result<T>: how expected failures (bad files, bad input, unsupported configs) travel.
// Bugs are not Status: they hit DI_CHECK, which is always on and prints file:line and the condition.
// Invariant: a Status message names the thing that is wrong (file, tensor, field, byte offset).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace deepinfer {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status error(std::string message) { return Status(std::move(message)); }
  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : value_(std::move(status)) {}  // NOLINT
  bool ok() const { return std::holds_alternative<T>(value_); }
  const Status& status() const { return std::get<Status>(value_); }
  T& value() { return std::get<T>(value_); }
  const T& value() const { return std::get<T>(value_); }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> value_;
};

[[noreturn]] inline void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "DI_CHECK failed at %s:%d: %s %s\n", file, line, cond, msg.c_str());
  std::abort();
}

}  // namespace deepinfer

#define DI_CHECK(cond) \
  do { if (!(cond)) ::deepinfer::check_failed(__FILE__, __LINE__, #cond, ""); } while (0)
#define DI_CHECK_MSG(cond, msg) \
  do { if (!(cond)) ::deepinfer::check_failed(__FILE__, __LINE__, #cond, (msg)); } while (0)

// Propagate a failed Status from an expression returning Status.
#define DI_RETURN_IF_ERROR(expr) \
  do { ::deepinfer::Status di_status_ = (expr); if (!di_status_.ok()) return di_status_; } while (0)
