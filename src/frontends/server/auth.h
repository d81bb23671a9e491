#pragma once
// --api-key: every endpoint but /health needs "Authorization: Bearer KEY" (as vLLM's --api-key).
#include <string>
#include <string_view>

namespace parity::server {

// Compares in time that depends only on the lengths, so response time does not tell an attacker
// how many leading characters of a guess were right.
bool constant_time_equal(std::string_view a, std::string_view b);
// The Authorization header's value carries exactly "Bearer <key>".
bool bearer_matches(std::string_view authorization, std::string_view key);

}  // namespace parity::server
