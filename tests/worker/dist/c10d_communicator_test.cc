// The gloo communicator across threads: every collective against values
// computed by hand, subgroups, point to point, and the failure contract (a rank
// that dies makes the others fail fast, not hang).
#include <chrono>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "tests/worker/dist/run_ranks.h"
#include "worker/dist/communicator.h"

namespace orrery::dist {
namespace {

using testing_worker::RunRanks;

Status Expect(bool cond, const std::string& what) {
  return cond ? OkStatus() : InternalError(what);
}

TEST(GlooCommunicatorTest, CollectivesComputeTheRightValues) {
  at::set_num_threads(1);
  auto results = RunRanks(3, [](int rank, Rendezvous* rdv) -> Status {
    ORRERY_ASSIGN_OR_RETURN(auto comm, rdv->NewGroup("all", {0, 1, 2}));
    ORRERY_RETURN_IF_ERROR(
        Expect(comm->rank() == rank && comm->size() == 3 && comm->backend() == "gloo", "identity"));
    at::Tensor t = at::full({4}, static_cast<float>(rank + 1));
    ORRERY_RETURN_IF_ERROR(comm->AllReduce(t, ReduceOp::kSum));
    ORRERY_RETURN_IF_ERROR(Expect(t.eq(6.0).all().item<bool>(), "sum"));
    t.fill_(static_cast<float>(rank + 1));
    ORRERY_RETURN_IF_ERROR(comm->AllReduce(t, ReduceOp::kAvg));
    ORRERY_RETURN_IF_ERROR(Expect(t.eq(2.0).all().item<bool>(), "avg"));
    t.fill_(static_cast<float>(rank + 1));
    ORRERY_RETURN_IF_ERROR(comm->AllReduce(t, ReduceOp::kMax));
    ORRERY_RETURN_IF_ERROR(Expect(t.eq(3.0).all().item<bool>(), "max"));

    at::Tensor in = at::arange(2, at::kFloat) + 10.0f * static_cast<float>(rank);
    at::Tensor out = at::zeros({6});
    ORRERY_RETURN_IF_ERROR(comm->AllGather(in, out));
    ORRERY_RETURN_IF_ERROR(
        Expect(out.equal(at::tensor({0.f, 1.f, 10.f, 11.f, 20.f, 21.f})), "all_gather"));

    at::Tensor rs_in = at::arange(6, at::kFloat) * static_cast<float>(rank + 1);
    at::Tensor rs_out = at::zeros({2});
    ORRERY_RETURN_IF_ERROR(comm->ReduceScatter(rs_in, rs_out, ReduceOp::kSum));
    // sum over ranks of (r+1) * [0..5] = 6 * [0..5]; this rank keeps its chunk.
    at::Tensor want = at::arange(6, at::kFloat).narrow(0, 2 * rank, 2) * 6.0f;
    ORRERY_RETURN_IF_ERROR(Expect(rs_out.equal(want), "reduce_scatter"));

    at::Tensor b = at::full({3}, rank == 2 ? 7.0f : 0.0f);
    ORRERY_RETURN_IF_ERROR(comm->Broadcast(b, 2));
    ORRERY_RETURN_IF_ERROR(Expect(b.eq(7.0).all().item<bool>(), "broadcast"));

    // A ring of sends: each rank sends its id to the next.
    at::Tensor msg = at::full({2}, static_cast<float>(rank));
    auto pending = comm->SendAsync(msg, (rank + 1) % 3, 5);
    at::Tensor got = at::zeros({2});
    ORRERY_RETURN_IF_ERROR(comm->Recv(got, (rank + 2) % 3, 5));
    ORRERY_RETURN_IF_ERROR(pending->Wait());
    ORRERY_RETURN_IF_ERROR(
        Expect(got.eq(static_cast<float>((rank + 2) % 3)).all().item<bool>(), "send/recv"));
    return comm->Barrier();
  });
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(GlooCommunicatorTest, SubgroupsAreIndependent) {
  at::set_num_threads(1);
  auto results = RunRanks(4, [](int rank, Rendezvous* rdv) -> Status {
    std::vector<int> members = rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    ORRERY_ASSIGN_OR_RETURN(auto comm, rdv->NewGroup(rank < 2 ? "low" : "high", members));
    at::Tensor t = at::full({1}, static_cast<float>(rank));
    ORRERY_RETURN_IF_ERROR(comm->AllReduce(t, ReduceOp::kSum));
    return Expect(t.item<float>() == (rank < 2 ? 1.0f : 5.0f), "subgroup sum");
  });
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(GlooCommunicatorTest, ShapeMismatchesAreRejected) {
  at::set_num_threads(1);
  auto results = RunRanks(1, [](int, Rendezvous* rdv) -> Status {
    ORRERY_ASSIGN_OR_RETURN(auto comm, rdv->NewGroup("solo", {0}));
    at::Tensor out = at::zeros({3});
    Status s = comm->AllGather(at::zeros({2}), out);
    ORRERY_RETURN_IF_ERROR(
        Expect(s.code() == StatusCode::kInvalidArgument, "all_gather size check"));
    auto missing = rdv->NewGroup("other", {1});
    return Expect(!missing.ok(), "group without this rank");
  });
  EXPECT_TRUE(results[0].ok()) << results[0];
}

TEST(GlooCommunicatorTest, ADeadRankMakesTheOthersFailFast) {
  at::set_num_threads(1);
  // The timeout is long; the survivor must notice the closed connection well
  // before it.
  auto start = std::chrono::steady_clock::now();
  auto results = RunRanks(
      2,
      [](int rank, Rendezvous* rdv) -> Status {
        ORRERY_ASSIGN_OR_RETURN(auto comm, rdv->NewGroup("all", {0, 1}));
        at::Tensor t = at::ones({8});
        ORRERY_RETURN_IF_ERROR(comm->AllReduce(t, ReduceOp::kSum));
        if (rank == 1) {
          comm.reset();  // this rank "dies": its sockets close
          return OkStatus();
        }
        Status s;
        for (int i = 0; i < 50 && s.ok(); ++i) s = comm->AllReduce(t, ReduceOp::kSum);
        return s;
      },
      std::chrono::milliseconds(60000));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(results[1].ok()) << results[1];
  ASSERT_FALSE(results[0].ok());
  EXPECT_EQ(results[0].code(), StatusCode::kUnavailable) << results[0];
  EXPECT_LT(seconds, 20.0);
}

TEST(GlooCommunicatorTest, AMissingRankTimesOutAtRendezvous) {
  at::set_num_threads(1);
  auto results = RunRanks(
      2,
      [](int rank, Rendezvous* rdv) -> Status {
        if (rank == 1) return OkStatus();  // never joins the group
        auto comm = rdv->NewGroup("all", {0, 1});
        return comm.ok() ? OkStatus() : comm.status();
      },
      std::chrono::milliseconds(1500));
  ASSERT_FALSE(results[0].ok());
  EXPECT_EQ(results[0].code(), StatusCode::kDeadlineExceeded) << results[0];
}

TEST(RendezvousTest, ReadsTheKubernetesEnvironment) {
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("MASTER_ADDR", "job-0.job", 1);
  setenv("MASTER_PORT", "23456", 1);
  auto c = RendezvousFromEnv();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rank, 3);
  EXPECT_EQ(c->world_size, 4);
  EXPECT_EQ(c->master_addr, "job-0.job");
  EXPECT_EQ(c->master_port, 23456);
  setenv("RANK", "4", 1);
  EXPECT_FALSE(RendezvousFromEnv().ok());
  setenv("RANK", "x", 1);
  EXPECT_FALSE(RendezvousFromEnv().ok());
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
}

TEST(RendezvousTest, TcpStoreServesTheWorld) {
  at::set_num_threads(1);
  // Port from the pid so concurrent test runs rarely collide.
  int port = 20000 + static_cast<int>(getpid() % 20000);
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r]() {
      RendezvousConfig c;
      c.rank = r;
      c.world_size = 2;
      c.master_addr = "127.0.0.1";
      c.master_port = port;
      c.bind_host = "127.0.0.1";
      c.timeout = std::chrono::milliseconds(20000);
      auto rdv = Connect(c);
      if (!rdv.ok()) {
        results[static_cast<size_t>(r)] = rdv.status();
        return;
      }
      auto comm = (*rdv)->NewGroup("all", {0, 1});
      if (!comm.ok()) {
        results[static_cast<size_t>(r)] = comm.status();
        return;
      }
      at::Tensor t = at::ones({2});
      results[static_cast<size_t>(r)] = (*comm)->AllReduce(t, ReduceOp::kSum);
      if (results[static_cast<size_t>(r)].ok() && t[0].item<float>() != 2.0f)
        results[static_cast<size_t>(r)] = InternalError("sum");
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace orrery::dist
