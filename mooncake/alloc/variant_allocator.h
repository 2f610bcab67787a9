// VariantAllocator<As...>: one of several Allocator models, chosen at run
// time. It holds a std::variant of the models and every call goes to the one
// it holds, so a program can let its operator pick the model
// (tools/mooncake_store --allocator) while its users, such as the store's
// SegmentPool and Master, are instantiated once, over the variant, instead of
// once per model. The cost is one std::visit per call.
//
// There is no default constructor: construct from a model (moved in).
//
// Claim(offset, size) goes to the held model's Claim (TlsfAllocator::Claim,
// KvAllocator::Claim), and AllocateRelocating(size, alignment, options,
// movable, relocate) to the held model's filtered one; a model without one
// answers std::nullopt.
//
// Thread-safety: none, as the models (allocator.h); LockedAllocator wraps it.
#ifndef MOONCAKE_ALLOC_VARIANT_ALLOCATOR_H_
#define MOONCAKE_ALLOC_VARIANT_ALLOCATOR_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "mooncake/alloc/allocator.h"
#include "mooncake/alloc/internal/archetype.h"

namespace mooncake::alloc {

// A model with a filtered AllocateRelocating (what VariantAllocator forwards).
template <typename A>
concept RelocatingModel = requires(std::remove_cvref_t<A>& a, const RelocationOptions& o,
                                   bool (*movable)(uint64_t, AllocationHandle),
                                   void (*relocate)(const Relocation&)) {
  {
    a.AllocateRelocating(uint64_t{1}, uint64_t{1}, o, movable, relocate)
    } -> std::same_as<std::optional<Allocation>>;
};

template <Allocator First, Allocator... Rest>
class VariantAllocator {
 public:
  template <typename A>
  requires(std::same_as<std::remove_cvref_t<A>, First> ||
           (std::same_as<std::remove_cvref_t<A>, Rest> || ...)) explicit VariantAllocator(A&& model)
      : model_(std::in_place_type<std::remove_cvref_t<A>>, std::forward<A>(model)) {}

  [[nodiscard]] std::optional<Allocation> allocate(uint64_t size, uint64_t alignment) {
    return std::visit([&](auto& a) { return a.allocate(size, alignment); }, model_);
  }
  void free(const Allocation& allocation) {
    std::visit([&](auto& a) { a.free(allocation); }, model_);
  }
  AllocatorStats stats() const {
    return std::visit([](const auto& a) { return a.stats(); }, model_);
  }
  [[nodiscard]] std::optional<Allocation> Claim(uint64_t offset, uint64_t size) {
    return std::visit(
        [&](auto& a) -> std::optional<Allocation> {
          if constexpr (requires {
                          { a.Claim(offset, size) } -> std::same_as<std::optional<Allocation>>;
                        }) {
            return a.Claim(offset, size);
          } else {
            return std::nullopt;
          }
        },
        model_);
  }

  // Whether the held model offers AllocateRelocating with a filter
  // (TlsfAllocator, KvAllocator).
  bool SupportsRelocation() const {
    return std::visit([](const auto& a) { return RelocatingModel<decltype(a)>; }, model_);
  }

  // The held model's AllocateRelocating(size, alignment, options, movable,
  // relocate) (allocator.h, Relocation); a model without one answers
  // std::nullopt without calling anything.
  template <typename Movable, typename Relocate>
  [[nodiscard]] std::optional<Allocation> AllocateRelocating(uint64_t size, uint64_t alignment,
                                                             const RelocationOptions& options,
                                                             Movable&& movable,
                                                             Relocate&& relocate) {
    return std::visit(
        [&](auto& a) -> std::optional<Allocation> {
          if constexpr (requires {
                          {
                            a.AllocateRelocating(size, alignment, options, movable, relocate)
                            } -> std::same_as<std::optional<Allocation>>;
                        }) {
            return a.AllocateRelocating(size, alignment, options, movable, relocate);
          } else {
            return std::nullopt;
          }
        },
        model_);
  }

  // Which model it holds: 0 for First, then Rest in order.
  size_t index() const { return model_.index(); }
  // The held model, or null when it holds another.
  template <typename A>
  const A* get_if() const {
    return std::get_if<A>(&model_);
  }

 private:
  std::variant<First, Rest...> model_;
};

static_assert(Allocator<VariantAllocator<alloc_internal::AllocatorArchetype>>);

}  // namespace mooncake::alloc

#endif  // MOONCAKE_ALLOC_VARIANT_ALLOCATOR_H_
