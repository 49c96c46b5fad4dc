// The Responses API's memory for previous_response_id: each stored response's whole conversation as Responses
// input items (the items it continued from, its own input, then its output items: reasoning, message,
// function_call), kept in process memory and bounded by count, least recently used first out. Nothing is
// persisted; a restart forgets everything. Thread-safe (one mutex; entries are immutable and shared).
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/api_common.h"

namespace deepinfer::server {

class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}

  // Keeps `items` under `id` (evicting the least recently used entry when full). A capacity of 0 keeps nothing.
  void put(const std::string& id, std::shared_ptr<const Json> items);
  // The items stored under `id` (and marks them recently used), or null.
  std::shared_ptr<const Json> get(const std::string& id);
  size_t capacity() const { return capacity_; }

 private:
  using Order = std::list<std::string>;  // most recently used first
  struct Entry {
    std::shared_ptr<const Json> items;
    Order::iterator position;
  };
  const size_t capacity_;
  std::mutex mu_;
  Order order_;
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace deepinfer::server
