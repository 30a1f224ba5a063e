// A user's ps-lite application built against an installed pstwin: every worker pushes its rank + 1
// to one key per server; after a worker barrier each pulls the sum of all ranks + 1.
#include <vector>

#include "ps/ps.h"

int main() {
  ps::Start(0);
  std::unique_ptr<ps::KVServer<double>> server;
  if (ps::IsServer()) {
    server = std::make_unique<ps::KVServer<double>>(0);
    server->set_request_handle(ps::KVServerDefaultHandle<double>());
  }
  if (ps::IsWorker()) {
    ps::KVWorker<double> kv(0, 0);
    std::vector<ps::Key> keys;
    for (int s = 0; s < ps::NumServers(); ++s) keys.push_back(ps::kMaxKey / ps::NumServers() * s + 1);
    const std::vector<double> mine(keys.size(), ps::MyRank() + 1);
    kv.Wait(kv.Push(keys, mine));
    ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);
    std::vector<double> sums;
    kv.Wait(kv.Pull(keys, &sums));
    const int n = ps::NumWorkers();
    for (double sum : sums) CHECK_EQ(sum, n * (n + 1) / 2.0);
    LL << "sum_app: worker " << ps::MyRank() << " pulled " << sums.size() << " sums of " << n << " workers";
  }
  ps::Finalize(0, true);
  return 0;
}
