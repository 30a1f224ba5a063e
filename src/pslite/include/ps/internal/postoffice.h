// This process's node of a ps-lite job (ps-lite's Postoffice): its role and rank from the DMLC_*
// environment, the job's shape, start, barriers and finalize. pstwin runs the node on its own
// protocol (registration with the scheduler, node table, heartbeats, orderly shutdown); docs/API.md.
#ifndef PS_INTERNAL_POSTOFFICE_H_
#define PS_INTERNAL_POSTOFFICE_H_

#include <functional>
#include <memory>
#include <vector>

#include "ps/base.h"
#include "ps/internal/message.h"
#include "ps/range.h"

namespace ps {

class Customer;

class Postoffice {
 public:
  static Postoffice* Get();

  // The first call starts the node; every call then waits, with do_barrier, until every node of the
  // job has started. Throws nothing: bad configuration (a DMLC_* variable) ends the process with status 2
  // and a message naming it.
  void Start(int customer_id, const char* argv0, bool do_barrier);
  // With do_barrier, waits until every node of the job finalized, then the node stops; every customer
  // that called Start must call Finalize. The exit callbacks run once the node stopped.
  void Finalize(int customer_id, bool do_barrier = true);
  void RegisterExitCallback(const std::function<void()>& cb);
  // Waits until every node of `node_group` (kWorkerGroup, kServerGroup, or both) called Barrier with it.
  void Barrier(int customer_id, int node_group);

  int num_workers() const;
  int num_servers() const;
  bool is_worker() const;
  bool is_server() const;
  bool is_scheduler() const;
  // Rank within the role (valid after Start): servers and workers are numbered from 0.
  int my_rank() const;
  // This node's id (valid after Start).
  int my_id() const;
  int verbose() const;
  // The node ids of a group or of one node.
  std::vector<int> GetNodeIDs(int node_id) const;
  // Server i holds keys [kMaxKey / n * i, kMaxKey / n * (i + 1)).
  const std::vector<Range>& GetServerKeyRanges();
  static int WorkerRankToID(int rank) { return rank * 2 + 9; }
  static int ServerRankToID(int rank) { return rank * 2 + 8; }
  static int IDtoRank(int id) { return (id - 8) / 2 > 0 ? (id - 8) / 2 : 0; }

  // For the apps: sends one message (recver a node id; to this node itself it is delivered locally),
  // and registers or removes a customer.
  void Send(const Message& msg);
  void AddCustomer(Customer* customer);
  void RemoveCustomer(Customer* customer);

  struct Node;  // the running node (library-internal)

 private:
  Postoffice();
  ~Postoffice();
  std::unique_ptr<Node> node_;
};

}  // namespace ps

#endif  // PS_INTERNAL_POSTOFFICE_H_
