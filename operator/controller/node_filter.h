// Which nodes a job's pods can run on, as kube-scheduler and the node
// lifecycle decide it for the parts a job controls: the world a job plans on is
// the nodes its pods can actually run on, so placement never pins a gang where
// the scheduler would refuse it.
// - NodeRefusal: not cordoned (spec.unschedulable), every nodeSelector label
//   equal, every NoSchedule and NoExecute taint tolerated (Kubernetes'
//   toleration rules: https://kubernetes.io/docs/concepts/scheduling-eviction/
//   taint-and-toleration/). PreferNoSchedule is a preference and admits. The
//   node lifecycle controller's node.kubernetes.io/not-ready and /unreachable
//   taints mirror the Ready condition, judged on its own below.
// - NodeUnready: a node whose Ready condition is not True, with how long it has
//   been so; a node NotReady or unreachable for less than the grace period
//   still holds its gangs (Kubernetes' own default is to evict after 300 s, its
//   not-ready and unreachable tolerations), a longer one loses them.
#pragma once

#include <ctime>
#include <optional>
#include <string>

#include "operator/api/types.h"
#include "operator/api/yaml.h"

namespace orrery::controller {

using api::Json;

// Whether toleration `t` tolerates `taint` (a node's spec.taints entry).
bool Tolerates(const api::Toleration& t, const Json& taint);

// "" when pods of a job with `resources` may be placed on `node`; else why
// not, naming the node and what refuses ("node gpu-3 is cordoned", "node gpu-1
// has taint pool=a100:NoSchedule that spec.resources.tolerations do not
// tolerate", "node gpu-2 does not match spec.resources.nodeSelector pool=h100").
std::string NodeRefusal(const Json& node, const api::ResourcesSpec& resources);

// Seconds the node has not been Ready at `now` (from its Ready condition's
// lastTransitionTime; a node with no Ready condition or no time: unready for
// ever); nullopt when it is Ready.
std::optional<double> UnreadySeconds(const Json& node, std::time_t now);

// RFC 3339 UTC ("2026-01-01T00:00:00Z", fractions allowed) to seconds since
// the epoch; nullopt when it is not that.
std::optional<std::time_t> ParseRfc3339(const std::string& text);

}  // namespace orrery::controller
