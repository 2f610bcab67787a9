// EvictionPolicyArchetype: the least a type must declare to model
// EvictionPolicy over BlockKey.
//
// Declarations only: class templates parameterised on policies (a run-time
// choice among them) static_assert their own conformance against it right
// after their definition, independent of any concrete model.
#ifndef MOONCAKE_INDEX_INTERNAL_POLICY_ARCHETYPE_H_
#define MOONCAKE_INDEX_INTERNAL_POLICY_ARCHETYPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "mooncake/index/block_key.h"
#include "mooncake/index/eviction_policy.h"

namespace mooncake::index_internal {

struct EvictionPolicyArchetype {
  using key_type = index::BlockKey;
  void Touch(std::span<const key_type> chain);
  void Admit(std::span<const key_type> chain, size_t first_new, uint64_t charge);
  bool Erase(const key_type& key);
  template <typename CanEvict>
  std::optional<index::Eviction<key_type>> Evict(CanEvict&& can_evict);
  bool Contains(const key_type& key) const;
  size_t size() const;
  uint64_t charged() const;
};

static_assert(index::EvictionPolicy<EvictionPolicyArchetype>);

}  // namespace mooncake::index_internal

#endif  // MOONCAKE_INDEX_INTERNAL_POLICY_ARCHETYPE_H_
