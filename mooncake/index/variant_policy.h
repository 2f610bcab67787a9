// VariantPolicy<Ps...>: one of several EvictionPolicy models, chosen at run
// time. It holds a std::variant of the models and every call goes to the one
// it holds, so a program can let its operator pick the policy
// (tools/mooncake_store --eviction_policy) while its users, such as the
// store's Master, are instantiated once, over the variant, instead of once
// per policy. The cost is one std::visit per call.
//
// Models must share their key type. Default construction holds the first
// model, default-constructed; construct from a model (moved in: the models
// are move-only) to hold that one.
//
// Thread-safety: none; see eviction_policy.h.
#ifndef MOONCAKE_INDEX_VARIANT_POLICY_H_
#define MOONCAKE_INDEX_VARIANT_POLICY_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>

#include "mooncake/index/eviction_policy.h"
#include "mooncake/index/internal/policy_archetype.h"

namespace mooncake::index {

template <EvictionPolicy First, EvictionPolicy... Rest>
requires(std::same_as<typename First::key_type, typename Rest::key_type>&&...) class VariantPolicy {
 public:
  using key_type = typename First::key_type;

  VariantPolicy() = default;
  template <typename P>
  requires(std::same_as<std::remove_cvref_t<P>, First> ||
           (std::same_as<std::remove_cvref_t<P>, Rest> || ...)) explicit VariantPolicy(P&& policy)
      : policy_(std::in_place_type<std::remove_cvref_t<P>>, std::forward<P>(policy)) {}

  void Touch(std::span<const key_type> chain) {
    std::visit([&](auto& p) { p.Touch(chain); }, policy_);
  }
  void Admit(std::span<const key_type> chain, size_t first_new, uint64_t charge) {
    std::visit([&](auto& p) { p.Admit(chain, first_new, charge); }, policy_);
  }
  bool Erase(const key_type& key) {
    return std::visit([&](auto& p) { return p.Erase(key); }, policy_);
  }
  template <typename CanEvict>
  std::optional<Eviction<key_type>> Evict(CanEvict&& can_evict) {
    return std::visit([&](auto& p) { return p.Evict(can_evict); }, policy_);
  }
  bool Contains(const key_type& key) const {
    return std::visit([&](const auto& p) { return p.Contains(key); }, policy_);
  }
  size_t size() const {
    return std::visit([](const auto& p) { return p.size(); }, policy_);
  }
  uint64_t charged() const {
    return std::visit([](const auto& p) { return p.charged(); }, policy_);
  }

  // Which model it holds: 0 for First, then Rest in order.
  size_t index() const { return policy_.index(); }

 private:
  std::variant<First, Rest...> policy_;
};

static_assert(EvictionPolicy<VariantPolicy<index_internal::EvictionPolicyArchetype>>);

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_VARIANT_POLICY_H_
