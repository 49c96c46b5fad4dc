#include "server/response_store.h"

namespace deepinfer::server {

void ResponseStore::put(const std::string& id, std::shared_ptr<const Json> items) {
  if (capacity_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(id); it != entries_.end()) {
    order_.erase(it->second.position);
    entries_.erase(it);
  }
  while (entries_.size() >= capacity_) {
    entries_.erase(order_.back());
    order_.pop_back();
  }
  order_.push_front(id);
  entries_.emplace(id, Entry{std::move(items), order_.begin()});
}

std::shared_ptr<const Json> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second.position);  // iterators stay valid
  return it->second.items;
}

}  // namespace deepinfer::server
