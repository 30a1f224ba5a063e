// The ps-lite API (dmlc/ps-lite) on pstwin: a ps-lite application builds against these headers
// unchanged, links pstwin::pstwin (or `pkg-config --libs pstwin`) and runs as a node of a pstwin job,
// configured by the same DMLC_* variables. docs/API.md lists what is supported and what differs.
#ifndef PS_PS_H_
#define PS_PS_H_

#include <cstring>
#include <functional>
#include <thread>

#include "ps/base.h"
#include "ps/kv_app.h"
#include "ps/simple_app.h"

namespace ps {

inline int NumWorkers() {
  return Postoffice::Get()->num_workers();
}
inline int NumServers() {
  return Postoffice::Get()->num_servers();
}
inline bool IsWorker() {
  return Postoffice::Get()->is_worker();
}
inline bool IsServer() {
  return Postoffice::Get()->is_server();
}
inline bool IsScheduler() {
  return Postoffice::Get()->is_scheduler();
}
// This node's rank within its role, from 0 (after Start).
inline int MyRank() {
  return Postoffice::Get()->my_rank();
}
// Starts this node and waits until every node of the job started.
inline void Start(int customer_id, const char* argv0 = nullptr) {
  Postoffice::Get()->Start(customer_id, argv0, true);
}
// Starts this node without waiting for the others.
inline void StartAsync(int customer_id, const char* argv0 = nullptr) {
  Postoffice::Get()->Start(customer_id, argv0, false);
}
// Every customer that started calls it before the process exits; with do_barrier it waits for every node.
inline void Finalize(int customer_id, const bool do_barrier = true) {
  Postoffice::Get()->Finalize(customer_id, do_barrier);
}
// `cb` runs once the node stopped in Finalize.
inline void RegisterExitCallback(const std::function<void()>& cb) {
  Postoffice::Get()->RegisterExitCallback(cb);
}

}  // namespace ps

#endif  // PS_PS_H_
