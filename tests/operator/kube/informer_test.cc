// Integration tests of the informer against a real kube-apiserver: initial sync
// and handlers, the built-in indexes, a watch that survives an API server restart
// without missing or repeating a change, a forced 410 Gone (etcd compaction) that
// ends in a correct relist, and periodic resync on an injected clock.
#include "operator/kube/informer.h"

#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "operator/kube/api_error.h"
#include "tests/operator/kube/test_util.h"
#include "tests/testing/control_plane.h"

namespace orrery::kube {
namespace {

using namespace testutil;  // NOLINT(google-build-using-namespace): test helpers
using std::chrono::milliseconds;
using std::chrono::seconds;

// Records what the handlers were told, per key, in order.
struct Recorder {
  struct Entry {
    char kind;  // 'A', 'U', 'D'
    std::string rv;
    bool unknown = false;
  };
  std::mutex mu;
  std::map<std::string, std::vector<Entry>> log;
  int adds = 0, updates = 0, deletes = 0, resyncs = 0;

  EventHandlers Handlers() {
    return {[this](const ObjectPtr& o) {
              std::lock_guard<std::mutex> lock(mu);
              ++adds;
              log[KeyOf(*o)].push_back({'A', ResourceVersionOf(*o)});
            },
            [this](const ObjectPtr& old_obj, const ObjectPtr& o) {
              std::lock_guard<std::mutex> lock(mu);
              if (old_obj == o) {
                ++resyncs;
                return;
              }
              ++updates;
              log[KeyOf(*o)].push_back({'U', ResourceVersionOf(*o)});
            },
            [this](const ObjectPtr& o, bool unknown) {
              std::lock_guard<std::mutex> lock(mu);
              ++deletes;
              log[KeyOf(*o)].push_back({'D', ResourceVersionOf(*o), unknown});
            }};
  }
};

// True when the informer's cache holds exactly what the server lists.
bool CacheMatchesServer(Client& client, const Informer& inf, const std::string& ns) {
  auto list = ListAll(client, inf.resource(), ns, {});
  if (!list.ok()) return false;
  std::map<std::string, std::string> server;
  for (const auto& it : (*list)["items"]) server[KeyOf(it)] = ResourceVersionOf(it);
  std::map<std::string, std::string> cached;
  for (const auto& o : inf.store().List()) cached[KeyOf(*o)] = ResourceVersionOf(*o);
  return server == cached;
}

InformerOptions FastOptions(const std::string& ns) {
  InformerOptions o;
  o.ns = ns;
  o.page_size = 100;
  o.initial_backoff = milliseconds(100);
  o.max_backoff = seconds(1);
  return o;
}

// A Client that forwards to a real one, except that while closed it holds new
// watches back and cuts the open ones: a network partition of the watch path.
class GatedClient final : public Client {
 public:
  explicit GatedClient(Client* inner) : inner_(inner) {}
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
    for (auto* s : streams_) s->Cancel();
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

  StatusOr<Object> Get(const Resource& r, const std::string& ns, const std::string& n) override {
    return inner_->Get(r, ns, n);
  }
  StatusOr<Object> List(const Resource& r, const std::string& ns, const ListOptions& o) override {
    return inner_->List(r, ns, o);
  }
  StatusOr<Object> Create(const Resource& r, const std::string& ns, const Object& o) override {
    return inner_->Create(r, ns, o);
  }
  StatusOr<Object> Update(const Resource& r, const std::string& ns, const Object& o) override {
    return inner_->Update(r, ns, o);
  }
  StatusOr<Object> UpdateStatus(const Resource& r, const std::string& ns,
                                const Object& o) override {
    return inner_->UpdateStatus(r, ns, o);
  }
  Status Delete(const Resource& r, const std::string& ns, const std::string& n,
                const DeleteOptions& o) override {
    return inner_->Delete(r, ns, n, o);
  }
  StatusOr<Object> Patch(const Resource& r, const std::string& ns, const std::string& n,
                         PatchType t, const Object& p, const PatchOptions& o) override {
    return inner_->Patch(r, ns, n, t, p, o);
  }
  StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                               const ListOptions& o) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, seconds(1), [&] { return open_; }))
        return UnavailableError("gate closed");
    }
    ORRERY_ASSIGN_OR_RETURN(auto inner, inner_->Watch(r, ns, o));
    std::lock_guard<std::mutex> lock(mu_);
    auto s = std::make_unique<Stream>(this, std::move(inner));
    streams_.insert(s->inner.get());
    if (!open_) s->inner->Cancel();
    return std::unique_ptr<WatchStream>(std::move(s));
  }

 private:
  struct Stream final : WatchStream {
    Stream(GatedClient* g, std::unique_ptr<WatchStream> s) : gate(g), inner(std::move(s)) {}
    ~Stream() override {
      std::lock_guard<std::mutex> lock(gate->mu_);
      gate->streams_.erase(inner.get());
    }
    StatusOr<std::optional<WatchEvent>> Next() override { return inner->Next(); }
    void Cancel() override { inner->Cancel(); }
    GatedClient* gate;
    std::unique_ptr<WatchStream> inner;
  };
  Client* inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  std::set<WatchStream*> streams_;
};

class InformerTest : public orrery::testing::ControlPlaneTest {
 protected:
  void SetUp() override {
    ControlPlaneTest::SetUp();
    if (HasFatalFailure()) return;
    client_ = PlaneClient(*plane());
    ASSERT_NE(client_, nullptr);
  }
  std::unique_ptr<RestClient> client_;
};

TEST_F(InformerTest, SyncsThenFollowsChangesWithIndexes) {
  ASSERT_TRUE(CreateNamespace(*client_, "inf").ok());
  std::vector<Object> objs;
  for (int i = 0; i < 250; ++i) {
    Object cm = ConfigMap("inf", "cm-" + std::to_string(i));
    if (i % 10 == 0)
      cm["metadata"]["ownerReferences"] = {
          {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"name", "owner"}, {"uid", "owner-uid-1"}}};
    objs.push_back(cm);
  }
  ASSERT_TRUE(CreateAll(*client_, ConfigMaps(), objs).ok());

  Recorder rec;
  InformerOptions opts = FastOptions("inf");
  opts.indexers = {{kByOwner, OwnerIndex}};
  Informer inf(client_.get(), ConfigMaps(), opts);
  inf.AddEventHandler(rec.Handlers());
  EXPECT_FALSE(inf.HasSynced());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(seconds(30)));
  EXPECT_EQ(inf.store().Size(), 250u);
  {
    std::lock_guard<std::mutex> lock(rec.mu);
    EXPECT_EQ(rec.adds, 250);  // all handed to the handlers before HasSynced
  }
  EXPECT_EQ(inf.store().ByIndex(kByOwner, "owner-uid-1").size(), 25u);
  EXPECT_EQ(inf.store().ByIndex(kByNamespace, "inf").size(), 250u);

  ASSERT_TRUE(client_->Create(ConfigMaps(), "inf", ConfigMap("inf", "late")).ok());
  ASSERT_TRUE(
      client_->Patch(ConfigMaps(), "inf", "cm-1", PatchType::kMerge, {{"data", {{"x", "y"}}}})
          .ok());
  ASSERT_TRUE(client_->Delete(ConfigMaps(), "inf", "cm-0").ok());
  ASSERT_TRUE(Eventually([&] { return CacheMatchesServer(*client_, inf, "inf"); }));
  EXPECT_EQ(inf.store().ByIndex(kByOwner, "owner-uid-1").size(), 24u);
  ASSERT_NE(inf.store().Get("inf/cm-1"), nullptr);
  EXPECT_EQ((*inf.store().Get("inf/cm-1"))["data"]["x"], "y");
  std::lock_guard<std::mutex> lock(rec.mu);
  EXPECT_EQ(rec.log["inf/late"].back().kind, 'A');
  EXPECT_EQ(rec.log["inf/cm-1"].back().kind, 'U');
  EXPECT_EQ(rec.log["inf/cm-0"].back().kind, 'D');
  EXPECT_FALSE(rec.log["inf/cm-0"].back().unknown);
}

TEST_F(InformerTest, NodeIndexOnPods) {
  ASSERT_TRUE(CreateNamespace(*client_, "pods").ok());
  (void)client_->Create(
      {"", "v1", "serviceaccounts", true}, "pods",
      {{"apiVersion", "v1"}, {"kind", "ServiceAccount"}, {"metadata", {{"name", "default"}}}});
  for (int i = 0; i < 6; ++i) {
    Object pod = {{"apiVersion", "v1"},
                  {"kind", "Pod"},
                  {"metadata", {{"name", "p" + std::to_string(i)}, {"namespace", "pods"}}},
                  {"spec",
                   {{"nodeName", i % 2 == 0 ? "node-a" : "node-b"},
                    {"automountServiceAccountToken", false},
                    {"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
    auto r = client_->Create(Pods(), "pods", pod);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  InformerOptions opts = FastOptions("pods");
  opts.indexers = {{kByNode, NodeIndex}};
  Informer inf(client_.get(), Pods(), opts);
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(seconds(30)));
  EXPECT_EQ(inf.store().ByIndex(kByNode, "node-a").size(), 3u);
  EXPECT_EQ(inf.store().IndexKeys(kByNode, "node-b"),
            (std::vector<std::string>{"pods/p1", "pods/p3", "pods/p5"}));
}

TEST_F(InformerTest, WatchSurvivesApiServerRestartWithoutMissingOrRepeating) {
  ASSERT_TRUE(CreateNamespace(*client_, "restart").ok());
  Recorder rec;
  Informer inf(client_.get(), ConfigMaps(), FastOptions("restart"));
  inf.AddEventHandler(rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(seconds(30)));

  // A writer creates objects (each written once, so none can be coalesced away)
  // and keeps updating one counter, before, during and after the restart.
  std::atomic<bool> stop{false};
  std::mutex written_mu;
  std::set<std::string> created;
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) {
      std::string name = "obj-" + std::to_string(i);
      while (!stop) {
        auto r = client_->Create(ConfigMaps(), "restart", ConfigMap("restart", name));
        if (r.ok() || IsAlreadyExists(r.status())) {
          std::lock_guard<std::mutex> lock(written_mu);
          created.insert("restart/" + name);
          break;
        }
        std::this_thread::sleep_for(milliseconds(50));
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  std::this_thread::sleep_for(seconds(1));
  ASSERT_TRUE(plane()->RestartApiServer().ok());
  std::this_thread::sleep_for(seconds(2));
  stop = true;
  writer.join();

  ASSERT_TRUE(
      Eventually([&] { return CacheMatchesServer(*client_, inf, "restart"); }, seconds(60)));
  std::lock_guard<std::mutex> lock(rec.mu);
  std::lock_guard<std::mutex> wlock(written_mu);
  ASSERT_GT(created.size(), 20u);
  for (const auto& key : created) {
    auto it = rec.log.find(key);
    ASSERT_NE(it, rec.log.end()) << key << " was never seen";
    // Seen once, as an add: no duplicate from a re-watch or the relist.
    ASSERT_EQ(it->second.size(), 1u) << key;
    EXPECT_EQ(it->second[0].kind, 'A') << key;
  }
  EXPECT_EQ(rec.deletes, 0);
  EXPECT_EQ(rec.updates, 0);
  Informer::Stats st = inf.stats();
  EXPECT_GE(st.watches, 2);
  std::cout << "restart: lists=" << st.lists << " gone_relists=" << st.gone_relists
            << " watches=" << st.watches << " events=" << st.events << " failures=" << st.failures
            << "\n";
}

TEST_F(InformerTest, GoneAfterCompactionEndsInACorrectRelist) {
  ASSERT_TRUE(CreateNamespace(*client_, "gone").ok());
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(
        client_->Create(ConfigMaps(), "gone", ConfigMap("gone", "cm-" + std::to_string(i))).ok());
  GatedClient gated(client_.get());
  Recorder rec;
  Informer inf(&gated, ConfigMaps(), FastOptions("gone"));
  inf.AddEventHandler(rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(seconds(30)));
  int64_t lists_before = inf.stats().lists;

  // Cut the informer's watch, change things behind its back, compact etcd and
  // restart the API server so that its resourceVersion is history.
  gated.Close();
  for (int i = 10; i < 15; ++i)
    ASSERT_TRUE(
        client_->Create(ConfigMaps(), "gone", ConfigMap("gone", "cm-" + std::to_string(i))).ok());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(client_->Delete(ConfigMaps(), "gone", "cm-" + std::to_string(i)).ok());
  for (int i = 3; i < 5; ++i)
    ASSERT_TRUE(client_
                    ->Patch(ConfigMaps(), "gone", "cm-" + std::to_string(i), PatchType::kMerge,
                            {{"data", {{"v", "2"}}}})
                    .ok());
  ASSERT_TRUE(plane()->CompactEtcd().ok());
  ASSERT_TRUE(plane()->RestartApiServer().ok());
  gated.Open();

  ASSERT_TRUE(Eventually([&] { return CacheMatchesServer(*client_, inf, "gone"); }, seconds(60)));
  Informer::Stats st = inf.stats();
  EXPECT_GE(st.gone_relists, 1);
  EXPECT_GT(st.lists, lists_before);
  std::lock_guard<std::mutex> lock(rec.mu);
  for (int i = 0; i < 3; ++i) {
    auto& l = rec.log["gone/cm-" + std::to_string(i)];
    ASSERT_EQ(l.back().kind, 'D');
    EXPECT_TRUE(l.back().unknown);  // inferred by the relist
  }
  for (int i = 3; i < 5; ++i) EXPECT_EQ(rec.log["gone/cm-" + std::to_string(i)].back().kind, 'U');
  for (int i = 5; i < 10; ++i)
    EXPECT_EQ(rec.log["gone/cm-" + std::to_string(i)].size(), 1u);  // untouched: no event
  for (int i = 10; i < 15; ++i) EXPECT_EQ(rec.log["gone/cm-" + std::to_string(i)].back().kind, 'A');
}

TEST_F(InformerTest, ResyncRedeliversCachedObjectsOnTheClock) {
  ASSERT_TRUE(CreateNamespace(*client_, "resync").ok());
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(
        client_->Create(ConfigMaps(), "resync", ConfigMap("resync", "r" + std::to_string(i))).ok());
  FakeClock clock;
  Recorder rec;
  InformerOptions opts = FastOptions("resync");
  opts.resync_period = seconds(30);
  Informer inf(client_.get(), ConfigMaps(), opts, &clock);
  inf.AddEventHandler(rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(seconds(30)));
  std::this_thread::sleep_for(milliseconds(100));
  {
    std::lock_guard<std::mutex> lock(rec.mu);
    EXPECT_EQ(rec.resyncs, 0);
  }
  clock.Advance(seconds(30));
  ASSERT_TRUE(Eventually(
      [&] {
        std::lock_guard<std::mutex> lock(rec.mu);
        return rec.resyncs == 4;
      },
      seconds(5)));
  clock.Advance(seconds(30));
  ASSERT_TRUE(Eventually(
      [&] {
        std::lock_guard<std::mutex> lock(rec.mu);
        return rec.resyncs == 8;
      },
      seconds(5)));
}

}  // namespace
}  // namespace orrery::kube
