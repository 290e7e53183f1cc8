// Profiling on Kubernetes: a one-shot gang (headless Service and one pod per
// rank, like a training gang) running `orrery-worker profile` for one
// configuration the shared cache lacks, and the reading of its result from the
// finished pods. The profiler writes its JSON document to the termination
// message path, so the result travels in the pod's status and needs no log
// scraping; a pod killed for memory, crashing, or passing its deadline makes the
// configuration infeasible, never the job failed.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/expand.h"
#include "operator/api/types.h"
#include "operator/controller/gang.h"
#include "worker/contract/profile_record.h"

namespace orrery::controller {

inline constexpr const char* kProfileEntryAnnotation = "orrery.dev/profile-entry";

struct ProfileRequest {
  const api::ModelSelectionJob* job = nullptr;
  const api::ExpandedTask* task = nullptr;
  api::Template template_ = api::Template::kDdp;
  int gpus = 1;
  int64_t batch_size = 0;  // global; 0 = the task's own
  std::string device = "cuda";
  std::vector<std::string> placement;  // node per rank, or empty: the scheduler places
  int64_t deadline_seconds = 900;      // activeDeadlineSeconds: a hung trial ends DeadlineExceeded
  std::string backend = "nccl";
};

struct ProfileGang {
  contract::ProfileEntry key;  // signature, template, gpus, batch, device; no measurement
  std::string key_hash;        // ProfileKeyHash(key.Key()): the orrery.dev/profile label
  std::string service_name;
  Json service;
  std::vector<Json> pods;  // by rank
};

// The cache key a request measures: the task's model signature, the template, the
// ranks, the global batch (the task's own when the request leaves it 0), the device.
contract::ProfileEntry ProfileKey(const ProfileRequest& request);

StatusOr<ProfileGang> BuildProfileGang(const ProfileRequest& request);

// What a profile pod (or gang) tells once it is observed.
struct ProfileOutcome {
  enum class State { kRunning, kMeasured, kInfeasible };
  State state = State::kRunning;
  contract::ProfileEntry entry;  // the key always; the measurement when kMeasured
  std::string reason;            // kInfeasible: OOMKilled, Error, DeadlineExceeded, ...
  std::string message;           // kInfeasible: exit code and the message's tail
};

// One pod: kMeasured from a Succeeded pod's termination message (parsed by
// contract::ParseProfileDocument; measuredAt is the container's finish time),
// kInfeasible from a Failed pod with the reason, kRunning otherwise. An error
// when the pod is not a profile pod or a Succeeded pod's message is not a
// profile document (a bug to surface, not an infeasible configuration).
StatusOr<ProfileOutcome> ParseProfilePod(const Json& pod);

// A whole profile gang: infeasible when any rank failed, measured when rank 0
// succeeded with a document, running otherwise.
StatusOr<ProfileOutcome> ParseProfileGang(const std::vector<Json>& pods);

}  // namespace orrery::controller
