// An archive's entries found by name (zip_archive.h, tar_archive.h): the indices of the entries
// sorted by name once, then binary search. Entry types need a `name` std::string. Standard
// library only (the fuzz targets build it with the sanitizers).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

namespace attnzoo::io {

class EntryIndex {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  // Indexes `entries`; returns the index of an entry whose name an earlier one has too, or kNone.
  template <typename Entry>
  size_t build(const std::vector<Entry>& entries) {
    order_.resize(entries.size());
    for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    std::sort(order_.begin(), order_.end(),
              [&](size_t a, size_t b) { return entries[a].name < entries[b].name; });
    for (size_t i = 1; i < order_.size(); ++i) {
      if (entries[order_[i]].name == entries[order_[i - 1]].name) return order_[i];
    }
    return kNone;
  }

  // The entry of `entries` (as indexed) called `name`, or nullptr.
  template <typename Entry>
  const Entry* find(const std::vector<Entry>& entries, std::string_view name) const {
    const auto it =
        std::lower_bound(order_.begin(), order_.end(), name,
                         [&](size_t a, std::string_view n) { return entries[a].name < n; });
    if (it == order_.end() || entries[*it].name != name) return nullptr;
    return &entries[*it];
  }

 private:
  std::vector<size_t> order_;
};

}  // namespace attnzoo::io
