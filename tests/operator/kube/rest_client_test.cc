// Integration tests of RestClient against a real kube-apiserver: CRUD and typed
// errors for a core kind (ConfigMap) and a custom kind (Widget, a CRD of the
// test's own), patches and server-side apply, delete preconditions, paging
// through 2,000 objects, conflicting updates resolved by retry, and raw watches
// (streamed events, clean end at timeoutSeconds, cancel, 410 after compaction).
#include "operator/kube/rest_client.h"

#include <future>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "operator/kube/api_error.h"
#include "tests/operator/kube/test_util.h"
#include "tests/testing/control_plane.h"

namespace orrery::kube {
namespace {

using namespace testutil;  // NOLINT(google-build-using-namespace): test helpers
using std::chrono::seconds;

PatchOptions Manager(const std::string& name, bool force = false) {
  PatchOptions o;
  o.field_manager = name;
  o.force = force;
  return o;
}

PatchOptions StatusSubresource() {
  PatchOptions o;
  o.subresource = "status";
  return o;
}

class RestClientTest : public orrery::testing::ControlPlaneTest {
 protected:
  void SetUp() override {
    ControlPlaneTest::SetUp();
    if (HasFatalFailure()) return;
    client_ = PlaneClient(*plane());
    ASSERT_NE(client_, nullptr);
  }
  std::unique_ptr<RestClient> client_;
};

TEST_F(RestClientTest, ConfigMapCrudAndTypedErrors) {
  ASSERT_TRUE(CreateNamespace(*client_, "crud").ok());
  auto created = client_->Create(ConfigMaps(), "crud", ConfigMap("crud", "a", {{"k", "1"}}));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE((*created)["metadata"].value("uid", "").empty());

  auto dup = client_->Create(ConfigMaps(), "crud", ConfigMap("crud", "a"));
  EXPECT_TRUE(IsAlreadyExists(dup.status())) << dup.status();
  EXPECT_NE(dup.status().message().find("create configmaps crud/a"), std::string::npos)
      << dup.status();

  auto got = client_->Get(ConfigMaps(), "crud", "a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["data"]["k"], "1");

  // Update with the current resourceVersion succeeds; the stale one conflicts.
  Object fresh = *got;
  fresh["data"]["k"] = "2";
  auto updated = client_->Update(ConfigMaps(), "crud", fresh);
  ASSERT_TRUE(updated.ok()) << updated.status();
  Object stale = *got;
  stale["data"]["k"] = "3";
  auto conflict = client_->Update(ConfigMaps(), "crud", stale);
  EXPECT_TRUE(IsConflict(conflict.status())) << conflict.status();
  EXPECT_EQ(ReasonOf(conflict.status()), "Conflict");

  // JSON merge patch, then server-side apply with a field manager.
  auto merged =
      client_->Patch(ConfigMaps(), "crud", "a", PatchType::kMerge, {{"data", {{"m", "x"}}}});
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ((*merged)["data"]["k"], "2");
  EXPECT_EQ((*merged)["data"]["m"], "x");
  Object apply = {{"apiVersion", "v1"},
                  {"kind", "ConfigMap"},
                  {"metadata", {{"name", "a"}, {"namespace", "crud"}}},
                  {"data", {{"applied", "yes"}}}};
  auto applied =
      client_->Patch(ConfigMaps(), "crud", "a", PatchType::kApply, apply, Manager("orrery-test"));
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ((*applied)["data"]["applied"], "yes");
  bool has_manager = false;
  for (const auto& mf : (*applied)["metadata"]["managedFields"])
    if (mf.value("manager", "") == "orrery-test" && mf.value("operation", "") == "Apply")
      has_manager = true;
  EXPECT_TRUE(has_manager);
  // A second manager claiming the same field conflicts unless it forces.
  apply["data"]["applied"] = "other";
  auto clash =
      client_->Patch(ConfigMaps(), "crud", "a", PatchType::kApply, apply, Manager("someone-else"));
  EXPECT_TRUE(IsConflict(clash.status())) << clash.status();
  auto forced = client_->Patch(ConfigMaps(), "crud", "a", PatchType::kApply, apply,
                               Manager("someone-else", true));
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_EQ((*forced)["data"]["applied"], "other");
  EXPECT_FALSE(
      client_->Patch(ConfigMaps(), "crud", "a", PatchType::kApply, apply).ok());  // no manager

  // Delete with a wrong uid precondition conflicts; with the right one it deletes.
  DeleteOptions wrong;
  wrong.precondition_uid = "00000000-0000-0000-0000-000000000000";
  EXPECT_TRUE(IsConflict(client_->Delete(ConfigMaps(), "crud", "a", wrong)));
  DeleteOptions right;
  right.precondition_uid = (*created)["metadata"]["uid"];
  right.propagation = PropagationPolicy::kBackground;
  EXPECT_TRUE(client_->Delete(ConfigMaps(), "crud", "a", right).ok());
  EXPECT_TRUE(IsNotFound(client_->Get(ConfigMaps(), "crud", "a").status()));

  // The propagation policy reaches the server: Foreground deletion leaves the
  // object in place with the foregroundDeletion finalizer (this plane has no
  // garbage collector to finish it).
  ASSERT_TRUE(client_->Create(ConfigMaps(), "crud", ConfigMap("crud", "fg")).ok());
  DeleteOptions fg;
  fg.propagation = PropagationPolicy::kForeground;
  ASSERT_TRUE(client_->Delete(ConfigMaps(), "crud", "fg", fg).ok());
  auto pending = client_->Get(ConfigMaps(), "crud", "fg");
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_TRUE((*pending)["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ((*pending)["metadata"]["finalizers"], Object::array({"foregroundDeletion"}));
  ASSERT_TRUE(client_
                  ->Patch(ConfigMaps(), "crud", "fg", PatchType::kMerge,
                          {{"metadata", {{"finalizers", nullptr}}}})
                  .ok());
  EXPECT_TRUE(IsNotFound(client_->Get(ConfigMaps(), "crud", "fg").status()));
  EXPECT_TRUE(IsNotFound(client_->Delete(ConfigMaps(), "crud", "a")));
}

TEST_F(RestClientTest, InvalidObjectsCarryTheServersCauses) {
  auto bad = client_->Create(ConfigMaps(), "default", ConfigMap("default", "Not_A_Valid_Name"));
  ASSERT_TRUE(IsInvalid(bad.status())) << bad.status();
  auto causes = InvalidCauses(bad.status());
  ASSERT_FALSE(causes.empty());
  EXPECT_EQ(causes[0].field, "metadata.name");
}

TEST_F(RestClientTest, CustomKindCrudStatusAndSchemaErrors) {
  ASSERT_TRUE(EnsureWidgetCrd(*client_).ok());
  auto created = client_->Create(Widgets(), "default", Widget("default", "w1", 3));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(
      IsAlreadyExists(client_->Create(Widgets(), "default", Widget("default", "w1", 3)).status()));

  // Status goes through /status only: a status written by Update is dropped, and
  // a spec written by UpdateStatus is dropped.
  Object w = *created;
  w["status"] = {{"phase", "Ready"}};
  w["spec"]["size"] = 4;
  auto upd = client_->Update(Widgets(), "default", w);
  ASSERT_TRUE(upd.ok()) << upd.status();
  EXPECT_FALSE(upd->contains("status"));
  EXPECT_EQ((*upd)["spec"]["size"], 4);
  Object s = *upd;
  s["status"] = {{"phase", "Ready"}};
  s["spec"]["size"] = 99;
  auto st = client_->UpdateStatus(Widgets(), "default", s);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ((*st)["status"]["phase"], "Ready");
  EXPECT_EQ((*st)["spec"]["size"], 4);
  // Status with a stale resourceVersion conflicts too.
  EXPECT_TRUE(IsConflict(client_->UpdateStatus(Widgets(), "default", s).status()));
  auto patched = client_->Patch(Widgets(), "default", "w1", PatchType::kMerge,
                                {{"status", {{"phase", "Done"}}}}, StatusSubresource());
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["status"]["phase"], "Done");

  auto invalid = client_->Create(Widgets(), "default", Widget("default", "w2", -1));
  ASSERT_TRUE(IsInvalid(invalid.status())) << invalid.status();
  ASSERT_FALSE(InvalidCauses(invalid.status()).empty());
  EXPECT_EQ(InvalidCauses(invalid.status())[0].field, "spec.size");

  EXPECT_TRUE(client_->Delete(Widgets(), "default", "w1").ok());
  EXPECT_TRUE(IsNotFound(client_->Get(Widgets(), "default", "w1").status()));
  // A kind the server does not serve is NotFound too.
  EXPECT_TRUE(IsNotFound(
      client_->List({"test.orrery.dev", "v1", "gadgets", true}, "default", {}).status()));
}

TEST_F(RestClientTest, ForbiddenForAnAccountWithoutRights) {
  ASSERT_TRUE(client_
                  ->Create({"", "v1", "serviceaccounts", true}, "default",
                           {{"apiVersion", "v1"},
                            {"kind", "ServiceAccount"},
                            {"metadata", {{"name", "nobody"}}}})
                  .ok());
  // Ask the API server for a token of that account (TokenRequest).
  Object req = {{"apiVersion", "authentication.k8s.io/v1"},
                {"kind", "TokenRequest"},
                {"spec", {{"expirationSeconds", 600}}}};
  auto tok = client_->Create({"", "v1", "serviceaccounts/nobody/token", true}, "default", req);
  if (!tok.ok()) GTEST_SKIP() << "TokenRequest unavailable on this plane: " << tok.status();
  ClientConfig cfg = PlaneConfig(*plane());
  cfg.token = (*tok)["status"]["token"];
  auto nobody = RestClient::Create(cfg);
  ASSERT_TRUE(nobody.ok());
  auto denied = (*nobody)->List(ConfigMaps(), "kube-system", {});
  EXPECT_TRUE(IsForbidden(denied.status())) << denied.status();
  cfg.token = "not-a-token";
  auto stranger = RestClient::Create(cfg);
  ASSERT_TRUE(stranger.ok());
  EXPECT_TRUE(IsUnauthorized((*stranger)->List(ConfigMaps(), "default", {}).status()));
}

TEST_F(RestClientTest, PagesThroughTwoThousandObjects) {
  ASSERT_TRUE(CreateNamespace(*client_, "paging").ok());
  std::vector<Object> objs;
  for (int i = 0; i < 2000; ++i) {
    objs.push_back(ConfigMap("paging", "cm-" + std::to_string(i), {{"i", std::to_string(i)}},
                             {{"parity", i % 2 == 0 ? "even" : "odd"}}));
  }
  ASSERT_TRUE(CreateAll(*client_, ConfigMaps(), objs).ok());

  ListOptions lo;
  lo.limit = 300;
  std::set<std::string> names;
  int pages = 0;
  std::string first_rv;
  while (true) {
    auto page = client_->List(ConfigMaps(), "paging", lo);
    ASSERT_TRUE(page.ok()) << page.status();
    ++pages;
    EXPECT_LE((*page)["items"].size(), 300u);
    for (const auto& it : (*page)["items"]) names.insert(it["metadata"]["name"].get<std::string>());
    if (first_rv.empty()) first_rv = (*page)["metadata"].value("resourceVersion", "");
    lo.continue_token = (*page)["metadata"].value("continue", "");
    if (lo.continue_token.empty()) break;
  }
  EXPECT_EQ(pages, 7);  // ceil(2000 / 300)
  EXPECT_EQ(names.size(), 2000u);

  ListOptions all;
  all.limit = 500;
  all.label_selector = "parity=even";
  auto evens = ListAll(*client_, ConfigMaps(), "paging", all);
  ASSERT_TRUE(evens.ok()) << evens.status();
  EXPECT_EQ((*evens)["items"].size(), 1000u);
  EXPECT_FALSE((*evens)["metadata"].value("resourceVersion", "").empty());

  ListOptions by_field;
  by_field.field_selector = "metadata.name=cm-1234";
  auto one = client_->List(ConfigMaps(), "paging", by_field);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ((*one)["items"].size(), 1u);
  EXPECT_EQ((*one)["items"][0]["data"]["i"], "1234");
}

TEST_F(RestClientTest, ConflictingUpdatesResolveByRetry) {
  ASSERT_TRUE(
      client_->Create(ConfigMaps(), "default", ConfigMap("default", "counter", {{"n", "0"}})).ok());
  constexpr int kWriters = 4, kIncrements = 15;
  std::atomic<int> conflicts{0};
  std::vector<std::thread> writers;
  std::vector<Status> results(kWriters);
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < kIncrements && results[w].ok(); ++i) {
        results[w] = RetryOnConflict(
            [&]() -> Status {
              ORRERY_ASSIGN_OR_RETURN(Object cm, client_->Get(ConfigMaps(), "default", "counter"));
              cm["data"]["n"] = std::to_string(std::stoi(cm["data"]["n"].get<std::string>()) + 1);
              auto s = client_->Update(ConfigMaps(), "default", cm);
              if (IsConflict(s.status())) ++conflicts;
              return s.ok() ? OkStatus() : s.status();
            },
            100);
      }
    });
  }
  for (auto& t : writers) t.join();
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
  auto final_cm = client_->Get(ConfigMaps(), "default", "counter");
  ASSERT_TRUE(final_cm.ok());
  EXPECT_EQ((*final_cm)["data"]["n"], std::to_string(kWriters * kIncrements));
  // Four writers racing on one object do conflict; the retries absorbed that.
  EXPECT_GT(conflicts.load(), 0);
}

TEST_F(RestClientTest, WatchStreamsEventsAndEndsAtTimeout) {
  ASSERT_TRUE(CreateNamespace(*client_, "watch").ok());
  auto list = client_->List(ConfigMaps(), "watch", {});
  ASSERT_TRUE(list.ok());
  ListOptions lo;
  lo.resource_version = (*list)["metadata"]["resourceVersion"];
  lo.timeout_seconds = 3;
  auto stream = client_->Watch(ConfigMaps(), "watch", lo);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE(client_->Create(ConfigMaps(), "watch", ConfigMap("watch", "w")).ok());
  ASSERT_TRUE(
      client_->Patch(ConfigMaps(), "watch", "w", PatchType::kMerge, {{"data", {{"a", "b"}}}}).ok());
  ASSERT_TRUE(client_->Delete(ConfigMaps(), "watch", "w").ok());
  std::vector<WatchEvent::Type> types;
  auto start = std::chrono::steady_clock::now();
  while (true) {
    auto ev = (*stream)->Next();
    ASSERT_TRUE(ev.ok()) << ev.status();
    if (!ev->has_value()) break;  // the server closed the watch at timeoutSeconds
    if ((*ev)->type != WatchEvent::Type::kBookmark) types.push_back((*ev)->type);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(15));
  EXPECT_EQ(types,
            (std::vector<WatchEvent::Type>{WatchEvent::Type::kAdded, WatchEvent::Type::kModified,
                                           WatchEvent::Type::kDeleted}));
}

TEST_F(RestClientTest, CancelWakesABlockedWatch) {
  auto list = client_->List(ConfigMaps(), "quiet-namespace", {});
  ASSERT_TRUE(list.ok());
  ListOptions lo;
  lo.resource_version = (*list)["metadata"]["resourceVersion"];
  lo.timeout_seconds = 120;
  auto stream = client_->Watch(ConfigMaps(), "quiet-namespace", lo);
  ASSERT_TRUE(stream.ok()) << stream.status();
  WatchStream* s = stream->get();
  // Nothing happens in this namespace: Next blocks (bookmarks aside) until cancelled.
  auto next = std::async(std::launch::async, [s]() -> Status {
    while (true) {
      auto ev = s->Next();
      if (!ev.ok()) return ev.status();
      if (!ev->has_value()) return OkStatus();
    }
  });
  EXPECT_EQ(next.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  s->Cancel();
  ASSERT_EQ(next.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_EQ(next.get().code(), StatusCode::kCancelled);
}

TEST_F(RestClientTest, OldResourceVersionAfterCompactionIsGone) {
  auto first = client_->Create(ConfigMaps(), "default", ConfigMap("default", "old"));
  ASSERT_TRUE(first.ok());
  std::string old_rv = (*first)["metadata"]["resourceVersion"];
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(client_
                    ->Patch(ConfigMaps(), "default", "old", PatchType::kMerge,
                            {{"data", {{"i", std::to_string(i)}}}})
                    .ok());
  ASSERT_TRUE(plane()->CompactEtcd().ok());
  // A restarted API server's watch cache starts after the compaction, so a watch
  // from the old revision is Gone, whether as HTTP 410 or as an ERROR event.
  ASSERT_TRUE(plane()->RestartApiServer().ok());
  ListOptions lo;
  lo.resource_version = old_rv;
  lo.timeout_seconds = 10;
  Status watch_status;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto stream = client_->Watch(ConfigMaps(), "default", lo);
    if (!stream.ok()) {
      watch_status = stream.status();
    } else {
      auto ev = (*stream)->Next();
      if (!ev.ok())
        watch_status = ev.status();
      else if (ev->has_value() && (*ev)->type == WatchEvent::Type::kError)
        watch_status = (*ev)->ErrorStatus("watch");
      else
        watch_status = InternalError("watch from a compacted revision delivered an event");
    }
    if (watch_status.code() != StatusCode::kUnavailable) break;  // the server is still coming up
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(IsGone(watch_status)) << watch_status;
  // So is an exact list at the compacted revision.
  ListOptions exact;
  exact.resource_version = old_rv;
  exact.resource_version_match = "Exact";
  exact.limit = 10;
  auto expired = client_->List(ConfigMaps(), "default", exact);
  EXPECT_TRUE(IsGone(expired.status())) << expired.status();
}

TEST_F(RestClientTest, KubeconfigAndTlsTrust) {
  // The plane's own kubeconfig, as kubectl uses it.
  auto cfg = LoadKubeconfig(plane()->kubeconfig());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto from_kubeconfig = RestClient::Create(*cfg);
  ASSERT_TRUE(from_kubeconfig.ok()) << from_kubeconfig.status();
  EXPECT_TRUE((*from_kubeconfig)->List(Namespaces(), "", {}).ok());
  // Without the CA the server's certificate is not trusted...
  ClientConfig untrusted = PlaneConfig(*plane());
  untrusted.ca_file.clear();
  auto c = RestClient::Create(untrusted);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->List(Namespaces(), "", {}).status().code(), StatusCode::kUnavailable);
  // ...unless verification is skipped (tests only).
  untrusted.insecure_skip_tls_verify = true;
  auto insecure = RestClient::Create(untrusted);
  ASSERT_TRUE(insecure.ok());
  EXPECT_TRUE((*insecure)->List(Namespaces(), "", {}).ok());
  // The CA given as PEM data works like the file.
  ClientConfig with_data = PlaneConfig(*plane());
  auto pem = ReadFileToString(with_data.ca_file);
  ASSERT_TRUE(pem.ok());
  with_data.ca_file.clear();
  with_data.ca_data = *pem;
  auto d = RestClient::Create(with_data);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE((*d)->List(Namespaces(), "", {}).ok());
}

TEST_F(RestClientTest, UnreachableServerIsUnavailable) {
  ClientConfig cfg = PlaneConfig(*plane());
  cfg.server = "https://127.0.0.1:1";
  auto c = RestClient::Create(cfg);
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Get(ConfigMaps(), "default", "x");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("get configmaps default/x"), std::string::npos);
  cfg.ca_data = "not a certificate";
  EXPECT_EQ(RestClient::Create(cfg).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace orrery::kube
