// Names and labels of everything the controller creates. Every name is a pure
// function of what identifies the object (job, task, gang generation, rank, or a
// profile key), so an operator restarted at any moment computes the same names and
// a second create answers AlreadyExists instead of duplicating a pod.
//
// A name is a readable prefix followed by "-" and a 10-hex-digit FNV-1a hash of
// the identity: the hash keeps "a-b"/"c" and "a"/"b-c" (job/task) apart, and lets
// the readable part be cut when the whole would pass 63 characters. Names are
// DNS-1035 labels (lower-case alphanumerics and '-', starting with a letter, at
// most 63 characters), which satisfies pods (hostname), Services and ConfigMaps.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace orrery::controller {

inline constexpr size_t kMaxNameLength = 63;

// Label keys and values on every object the controller creates.
inline constexpr const char* kManagedByLabel = "app.kubernetes.io/managed-by";
inline constexpr const char* kManagedByValue = "orrery";
inline constexpr const char* kJobLabel = "orrery.dev/job";
inline constexpr const char* kTaskLabel = "orrery.dev/task";
inline constexpr const char* kGangLabel = "orrery.dev/gang";
inline constexpr const char* kRankLabel = "orrery.dev/rank";
inline constexpr const char* kProfileLabel = "orrery.dev/profile";
// Annotations that let a restarted operator read a pod's configuration back.
inline constexpr const char* kWorldSizeAnnotation = "orrery.dev/world-size";
inline constexpr const char* kGenerationAnnotation = "orrery.dev/generation";
inline constexpr const char* kConfigAnnotation = "orrery.dev/config";
inline constexpr const char* kNodeAnnotation = "orrery.dev/planned-node";
inline constexpr const char* kProfileKeyAnnotation = "orrery.dev/profile-key";
inline constexpr const char* kCheckpointWarningAnnotation = "orrery.dev/checkpoint-warning";
// A digest of the job's pod settings a gang was made with (gang.h:
// PodSettingsDigest): a running gang whose digest differs from the job's now
// was made before an edit of them, and restarts under the new ones.
inline constexpr const char* kPodSettingsAnnotation = "orrery.dev/pod-settings";

// 64-bit FNV-1a: fully specified, equal on every machine and standard library.
uint64_t Fnv1a64(std::string_view data);
// The first `digits` hex digits (at most 16) of Fnv1a64(data).
std::string HashHex(std::string_view data, size_t digits = 10);

// `readable` reduced to DNS-1035 characters (upper case lowered, anything else
// becomes '-', runs of '-' collapsed), prefixed with "o-" unless it starts with a
// letter, then "-" + HashHex(identity), cutting the readable part so the whole
// fits `max_length`.
std::string BoundedName(std::string_view readable, std::string_view identity,
                        size_t max_length = kMaxNameLength);

// A label value (at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends): the
// value itself when it is one, else a bounded name of it.
std::string LabelValue(std::string_view value);

// "<task>-g<generation>": the gang label value, made a valid label value.
std::string GangLabelValue(std::string_view task, int generation);

std::string GangServiceName(std::string_view job, std::string_view task, int generation);
std::string GangPodName(std::string_view job, std::string_view task, int generation, int rank);

// A DNS-label-safe hash of contract::ProfileEntry::Key(): the profile label value
// and the ConfigMap data key ("p" + 16 hex digits).
std::string ProfileKeyHash(std::string_view key);
std::string ProfileServiceName(std::string_view job, std::string_view key);
std::string ProfilePodName(std::string_view job, std::string_view key, int rank);

// Checks used by the builders' callers and tests.
bool IsDns1035Label(std::string_view name);
bool IsLabelValue(std::string_view value);

}  // namespace orrery::controller
