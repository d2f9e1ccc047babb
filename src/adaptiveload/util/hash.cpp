#include "adaptiveload/util/hash.h"

// Header-only xxHash: no library to link. GCC 12 reports a false -Warray-bounds inside its
// inlined update loop, so that warning is silenced for this file only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace adaptiveload {

Hasher::Hasher() : state_(XXH64_createState()) {
  XXH64_reset(static_cast<XXH64_state_t*>(state_), 0x41444150u);
}
Hasher::~Hasher() { XXH64_freeState(static_cast<XXH64_state_t*>(state_)); }
void Hasher::bytes(const void* p, size_t n) {
  XXH64_update(static_cast<XXH64_state_t*>(state_), p, n);
}
uint64_t Hasher::digest() const { return XXH64_digest(static_cast<const XXH64_state_t*>(state_)); }

}  // namespace adaptiveload
#pragma GCC diagnostic pop
