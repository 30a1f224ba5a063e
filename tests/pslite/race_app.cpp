// A ps-lite application with a race of its own: the server keeps the last value pushed to a key (no
// sum), and worker 0 assumes its push lands last. Whether it does depends on which push reaches the
// server first: in the simulator the seed decides (with perturbation.delivery_jitter), and a seed that
// makes worker 0's check fail fails the same way every time it is replayed (pslite/race_replay.py).
#include <memory>
#include <vector>

#include "ps/ps.h"

int main() {
  ps::Start(0);
  std::unique_ptr<ps::KVServer<float>> server;
  if (ps::IsServer()) {
    server = std::make_unique<ps::KVServer<float>>(0);
    server->set_request_handle(
        [](const ps::KVMeta& meta, const ps::KVPairs<float>& data, ps::KVServer<float>* s) {
          static std::vector<float> last;  // this process's: the simulator gives each its own globals
          if (meta.push) last.assign(data.vals.begin(), data.vals.end());
          ps::KVPairs<float> res;
          if (meta.pull) {
            res.keys = data.keys;
            res.vals = ps::SArray<float>(last);
          }
          s->Response(meta, res);
        });
  }
  if (ps::IsWorker()) {
    ps::KVWorker<float> kv(0, 0);
    const std::vector<ps::Key> keys{1};
    kv.Wait(kv.Push(keys, std::vector<float>{static_cast<float>(ps::MyRank() + 1)}));
    ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);
    std::vector<float> pulled;
    kv.Wait(kv.Pull(keys, &pulled));
    if (ps::MyRank() == 0) CHECK_EQ(pulled.at(0), 1.0f) << "worker 0's push did not land last";
  }
  ps::Finalize(0, true);
  return 0;
}
