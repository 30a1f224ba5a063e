// parse_node_env: the BytePS/ps-lite environment of `pstwin node`, accepted values, defaults, and
// error messages that name the variable, the bad value and a fix.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "realnet/nic_rate.hpp"
#include "realnet/node_address.hpp"
#include "realnet/node_env.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::realnet {
namespace {

using Env = std::map<std::string, std::string>;

Env worker_env() {
  return {{"DMLC_ROLE", "worker"},          {"DMLC_PS_ROOT_URI", "127.0.0.1"}, {"DMLC_PS_ROOT_PORT", "1234"},
          {"DMLC_NUM_WORKER", "2"},         {"DMLC_NUM_SERVER", "1"},          {"DMLC_WORKER_ID", "1"},
          {"BYTEPS_FORCE_DISTRIBUTED", "1"}};
}

// The message of the NodeEnvError `call` throws ("" if it does not throw).
template <typename Call>
std::string node_env_error(Call call) {
  try {
    call();
  } catch (const NodeEnvError& e) {
    return e.what();
  }
  return "";
}

// The message of the NodeEnvError parse_node_env throws for `env` ("" if it does not throw).
std::string error_of(const Env& env) {
  return node_env_error([&] { parse_node_env(env); });
}

Env with(Env env, const std::string& name, const std::string& value) {
  env[name] = value;
  return env;
}

Env without(Env env, const std::string& name) {
  env.erase(name);
  return env;
}

// The message check_env_names throws for `env` ("" if it does not throw).
std::string name_error_of(const Env& env) {
  return node_env_error([&] { check_env_names(env); });
}

TEST(NodeEnv, APsLiteApplicationsWorkerMayLeaveItsRankToTheScheduler) {
  const Env env = without(worker_env(), "DMLC_WORKER_ID");
  EXPECT_EQ(parse_node_env(env, {.worker_id_required = false}).worker_id, -1);
  EXPECT_EQ(parse_node_env(worker_env(), {.worker_id_required = false}).worker_id, 1);
  EXPECT_EQ(error_of(env), "DMLC_WORKER_ID is not set: it is required; e.g. export DMLC_WORKER_ID=0");
}

// mpirun / srun without DMLC_ROLE: rank 0 the scheduler, 1..DMLC_NUM_SERVER the servers, the rest workers.
Env launched(const std::string& rank, const std::string& size) {
  return {{"OMPI_COMM_WORLD_RANK", rank},
          {"OMPI_COMM_WORLD_SIZE", size},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", size},
          {"DMLC_PS_ROOT_PORT", "1234"},
          {"DMLC_NUM_SERVER", "2"}};
}

TEST(NodeEnv, MpirunRanksMapToSchedulerServersThenWorkers) {
  EXPECT_EQ(parse_node_env(launched("0", "6")).role, Role::kScheduler);
  EXPECT_EQ(parse_node_env(launched("2", "6")).role, Role::kServer);
  const NodeEnv worker = parse_node_env(launched("5", "6"));
  EXPECT_EQ(worker.role, Role::kWorker);
  EXPECT_EQ(worker.worker_id, 2);
  EXPECT_EQ(worker.num_workers, 3);
  EXPECT_EQ(worker.num_servers, 2);
  EXPECT_EQ(worker.root_uri, "127.0.0.1");  // every rank on this host
  // Ranks on several hosts: the scheduler's address must be given.
  EXPECT_EQ(error_of(with(launched("5", "6"), "OMPI_COMM_WORLD_LOCAL_SIZE", "3")),
            "DMLC_PS_ROOT_URI is not set: it is required; e.g. export DMLC_PS_ROOT_URI=127.0.0.1");
  // DMLC_ROLE set: the launcher's rank is not read.
  EXPECT_EQ(parse_node_env(with(worker_env(), "OMPI_COMM_WORLD_RANK", "0")).role, Role::kWorker);
}

TEST(NodeEnv, SlurmRanksMapLikeMpirun) {
  const Env env{{"SLURM_PROCID", "1"},
                {"SLURM_NTASKS", "3"},
                {"SLURM_NNODES", "2"},
                {"DMLC_PS_ROOT_URI", "10.0.0.1"},
                {"DMLC_PS_ROOT_PORT", "1234"}};
  const NodeEnv server = parse_node_env(env);
  EXPECT_EQ(server.role, Role::kServer);
  EXPECT_EQ(server.num_servers, 1);
  EXPECT_EQ(server.num_workers, 1);
  EXPECT_EQ(server.root_uri, "10.0.0.1");
}

TEST(NodeEnv, ALauncherJobOfTheWrongSizeIsRefusedSayingHowMany) {
  EXPECT_EQ(
      error_of(launched("0", "3")),
      "Open MPI (mpirun) started 3 processes (OMPI_COMM_WORLD_SIZE), too few for a scheduler, 2 server(s) "
      "(DMLC_NUM_SERVER) and a worker: start at least 4");
  EXPECT_EQ(error_of(with(launched("0", "6"), "DMLC_NUM_WORKER", "4")),
            "DMLC_NUM_WORKER=\"4\" but Open MPI (mpirun) started 6 processes: 1 scheduler, 2 server(s) and 3 "
            "worker(s); unset DMLC_NUM_WORKER or start 7 processes");
  EXPECT_EQ(error_of(with(launched("0", "6"), "OMPI_COMM_WORLD_RANK", "x")),
            "OMPI_COMM_WORLD_RANK=\"x\": expected a rank >= 0");
}

TEST(NodeEnv, AMisspelledVariableIsRefusedWithTheNameMeant) {
  Env env = worker_env();
  env["DMLC_PS_VAN_TYP"] = "epoll";
  EXPECT_EQ(name_error_of(env),
            "DMLC_PS_VAN_TYP=\"epoll\": not a variable pstwin reads; did you mean DMLC_PS_VAN_TYPE? "
            "(docs/ENVIRONMENT.md lists them)");
  // One letter too many, two swapped, the wrong case: all near misses.
  EXPECT_NE(name_error_of({{"DMLC_NUM_WORKERS", "2"}}).find("did you mean DMLC_NUM_WORKER?"),
            std::string::npos);
  EXPECT_NE(name_error_of({{"BYTEPS_ENALBE_ASYNC", "1"}}).find("did you mean BYTEPS_ENABLE_ASYNC?"),
            std::string::npos);
  EXPECT_NE(name_error_of({{"dmlc_role", "worker"}}).find("did you mean DMLC_ROLE?"), std::string::npos);
  // A near miss of a variable that is listed as not supported is named the same way.
  EXPECT_NE(name_error_of({{"DMLC_ENABLE_RDM", "1"}}).find("did you mean DMLC_ENABLE_RDMA?"),
            std::string::npos);
  // A name as long as an environment allows is far from every name pstwin knows: a warning.
  EXPECT_EQ(check_env_names({{"DMLC_" + std::string(std::size_t{1} << 20, 'X'), "1"}}).size(), 1u);
  // Everything parse_node_env reads passes, and so does what is not of these families.
  env.erase("DMLC_PS_VAN_TYP");
  env["HOME"] = "/root";
  env["PS1"] = "$ ";
  EXPECT_TRUE(check_env_names(env).empty());
}

TEST(NodeEnv, RdmaOrUcxAskedForSelectsTheUcxVanOtherUnsupportedVariablesWarn) {
  // BytePS's switch for RDMA, and ps-lite's for UCX: the ucx van, which uses RDMA where there is some.
  for (const std::string name : {"DMLC_ENABLE_RDMA", "DMLC_ENABLE_UCX"}) {
    Env env = worker_env();
    env[name] = "0";
    EXPECT_EQ(parse_node_env(env).van, realnet::Van::kEpoll) << name;
    env[name] = "1";
    const bool ucx = realnet::van_unavailable(realnet::Van::kUcx).empty();
    if (ucx) {
      EXPECT_EQ(parse_node_env(env).van, realnet::Van::kUcx) << name;
    } else {
      EXPECT_NE(error_of(env).find("install libucx-dev"), std::string::npos) << name;
    }
    env["DMLC_PS_VAN_TYPE"] = "ucx";
    if (ucx) {
      EXPECT_EQ(parse_node_env(env).van, realnet::Van::kUcx) << name;
    }
    // Asking for RDMA on a TCP van is a contradiction, not a choice.
    env["DMLC_PS_VAN_TYPE"] = "epoll";
    EXPECT_EQ(error_of(env), name +
                                 "=\"1\": expected 0 with DMLC_PS_VAN_TYPE=epoll (RDMA runs on the ucx "
                                 "van: unset DMLC_PS_VAN_TYPE or set it to ucx)");
    env.erase("DMLC_PS_VAN_TYPE");
    env[name] = "yes";
    EXPECT_EQ(error_of(env), name + "=\"yes\": expected 0 or 1");
    EXPECT_TRUE(check_env_names({{name, "1"}}).empty()) << name;  // a variable pstwin reads
  }
  const auto warnings = check_env_names({{"BYTEPS_SCHEDULING_CREDIT", "8"}, {"BYTEPS_SOMETHING_NEW", "3"}});
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(
      warnings[0],
      "BYTEPS_SCHEDULING_CREDIT=\"8\" is not supported yet (use --set ps.scheduling_credit=N); ignored");
  EXPECT_EQ(warnings[1],
            "BYTEPS_SOMETHING_NEW is not a variable pstwin reads (docs/ENVIRONMENT.md); ignored");
}

TEST(NodeEnv, ParsesTheFourTerminalWorkerLaunch) {
  const NodeEnv env = parse_node_env(worker_env());
  EXPECT_EQ(env.role, Role::kWorker);
  EXPECT_EQ(env.root_uri, "127.0.0.1");
  EXPECT_EQ(env.root_port, 1234);
  EXPECT_EQ(env.num_workers, 2);
  EXPECT_EQ(env.num_servers, 1);
  EXPECT_EQ(env.worker_id, 1);
  EXPECT_TRUE(env.force_distributed);
  EXPECT_EQ(env.scheduler_address(), "127.0.0.1:1234");
  EXPECT_EQ(env.bind_address(), "127.0.0.1:*");
}

TEST(NodeEnv, DefaultsForOptionalVariables) {
  const NodeEnv env = parse_node_env(without(worker_env(), "BYTEPS_FORCE_DISTRIBUTED"));
  EXPECT_EQ(env.node_host, "127.0.0.1");
  EXPECT_FALSE(env.partition_bytes);
  EXPECT_FALSE(env.enable_async);
  EXPECT_FALSE(env.server_engine_threads);
  EXPECT_FALSE(env.force_distributed);
  EXPECT_EQ(env.verbose, 0);
  EXPECT_EQ(env.log_level, "WARNING");
}

TEST(NodeEnv, SchedulerBindsTheRootAddressAndNeedsNoWorkerId) {
  Env vars = without(with(worker_env(), "DMLC_ROLE", "scheduler"), "DMLC_WORKER_ID");
  vars["DMLC_NODE_HOST"] = "10.0.0.7";
  const NodeEnv env = parse_node_env(vars);
  EXPECT_EQ(env.role, Role::kScheduler);
  EXPECT_EQ(env.worker_id, -1);
  EXPECT_EQ(env.bind_address(), "127.0.0.1:1234");
}

TEST(NodeEnv, ServerBindsNodeHostOnAFreePort) {
  Env vars = with(with(worker_env(), "DMLC_ROLE", "server"), "DMLC_NODE_HOST", "10.0.0.7");
  vars["DMLC_WORKER_ID"] = "99";  // set by some launchers for every role: ignored unless a worker
  const NodeEnv env = parse_node_env(vars);
  EXPECT_EQ(env.role, Role::kServer);
  EXPECT_EQ(env.worker_id, -1);
  EXPECT_EQ(env.bind_address(), "10.0.0.7:*");
}

TEST(NodeEnv, ANodePortIsListenedOnAndBadOnesAreRefused) {
  Env vars = with(with(worker_env(), "DMLC_ROLE", "server"), "DMLC_NODE_PORT", "9100");
  EXPECT_EQ(parse_node_env(vars).bind_address(), "127.0.0.1:9100");
  EXPECT_EQ(parse_node_env(with(vars, "DMLC_ROLE", "scheduler")).bind_address(), "127.0.0.1:1234");
  EXPECT_TRUE(check_env_names(vars).empty());  // read, not "not supported"
  for (const std::string bad : {"0", "65536", "x", "-1"})
    EXPECT_NE(error_of(with(vars, "DMLC_NODE_PORT", bad))
                  .find("DMLC_NODE_PORT=\"" + bad + "\": expected a port 1-65535"),
              std::string::npos)
        << bad << ": " << error_of(with(vars, "DMLC_NODE_PORT", bad));
}

// The message of the NodeEnvError resolve_node_address throws for `env` ("" if it does not throw).
std::string address_error_of(NodeEnv env) {
  return node_env_error([&] { resolve_node_address(env); });
}

TEST(NodeEnv, AnInterfaceGivesItsAddressAndAMissingOneListsThoseThereAre) {
  NodeEnv env = parse_node_env(with(worker_env(), "DMLC_INTERFACE", "lo"));
  EXPECT_EQ(env.interface, "lo");
  env.node_host = "";
  resolve_node_address(env);
  EXPECT_EQ(env.node_host, "127.0.0.1");
  const std::string missing =
      address_error_of(parse_node_env(with(worker_env(), "DMLC_INTERFACE", "nosuch9")));
  EXPECT_NE(missing.find("DMLC_INTERFACE=\"nosuch9\": this machine has no interface of that name"),
            std::string::npos)
      << missing;
  EXPECT_NE(missing.find("lo (127.0.0.1)"), std::string::npos) << missing;
  EXPECT_NE(error_of(with(worker_env(), "DMLC_INTERFACE", "eth0; rm")).find("a network interface's name"),
            std::string::npos);
}

TEST(NodeEnv, WithoutAHostTheAddressOfTheRouteToTheSchedulerIsAdvertised) {
  // A job on one machine keeps loopback.
  NodeEnv local = parse_node_env(worker_env());
  resolve_node_address(local);
  EXPECT_EQ(local.node_host, "127.0.0.1");
  // A scheduler at this machine's non-loopback address: the route to it starts at that address.
  std::string address;
  for (const auto& entry : ipv4_interfaces()) {
    const auto open = entry.find('(');
    const std::string ip = entry.substr(open + 1, entry.size() - open - 2);
    if (!is_loopback_ipv4(ip)) address = ip;
  }
  if (address.empty()) GTEST_SKIP() << "this machine has no non-loopback IPv4 address";
  NodeEnv env = parse_node_env(with(worker_env(), "DMLC_PS_ROOT_URI", address));
  resolve_node_address(env);
  EXPECT_EQ(env.node_host, address);
  EXPECT_EQ(env.bind_address(), address + ":*");
}

TEST(NodeEnv, ALoopbackAddressWithTheSchedulerOnAnotherMachineIsRefused) {
  // 192.0.2.1 (TEST-NET-1) is no address of this machine: the scheduler is elsewhere.
  const Env remote = with(worker_env(), "DMLC_PS_ROOT_URI", "192.0.2.1");
  const std::string given = address_error_of(parse_node_env(with(remote, "DMLC_NODE_HOST", "127.0.0.1")));
  EXPECT_NE(given.find("DMLC_NODE_HOST=\"127.0.0.1\" is a loopback address, but the scheduler "
                       "(DMLC_PS_ROOT_URI=\"192.0.2.1\") is on another machine"),
            std::string::npos)
      << given;
  const std::string interface = address_error_of(parse_node_env(with(remote, "DMLC_INTERFACE", "lo")));
  EXPECT_NE(interface.find("DMLC_INTERFACE=\"lo\" (127.0.0.1) is a loopback address"), std::string::npos)
      << interface;
  // The scheduler's own role binds the root address: nothing to resolve.
  EXPECT_EQ(address_error_of(parse_node_env(with(remote, "DMLC_ROLE", "scheduler"))), "");
}

TEST(NodeEnv, ReadsBytePSTuningVariables) {
  Env vars = worker_env();
  vars["BYTEPS_PARTITION_BYTES"] = "1024000";
  vars["BYTEPS_ENABLE_ASYNC"] = "1";
  vars["BYTEPS_SERVER_ENGINE_THREAD"] = "8";
  vars["PS_VERBOSE"] = "2";
  vars["BYTEPS_LOG_LEVEL"] = "debug";
  const NodeEnv env = parse_node_env(vars);
  EXPECT_EQ(env.partition_bytes, 1024000u);
  EXPECT_EQ(env.enable_async, true);
  EXPECT_EQ(env.server_engine_threads, 8);
  EXPECT_EQ(env.verbose, 2);
  EXPECT_EQ(env.log_level, "DEBUG");
  EXPECT_EQ(parse_node_env(with(worker_env(), "BYTEPS_ENABLE_ASYNC", "0")).enable_async, false);
}

TEST(NodeEnv, BytePSLogLevelRaisesVerbosityButNeverLowersIt) {
  EXPECT_EQ(parse_node_env(worker_env()).verbose, 0);
  EXPECT_EQ(parse_node_env(with(worker_env(), "BYTEPS_LOG_LEVEL", "trace")).verbose, 2);
  EXPECT_EQ(parse_node_env(with(worker_env(), "BYTEPS_LOG_LEVEL", "INFO")).verbose, 1);
  EXPECT_EQ(parse_node_env(with(worker_env(), "BYTEPS_LOG_LEVEL", "WARNING")).verbose, 0);
  EXPECT_EQ(parse_node_env(with(with(worker_env(), "PS_VERBOSE", "1"), "BYTEPS_LOG_LEVEL", "ERROR")).verbose,
            1);
}

TEST(NodeEnv, MissingRequiredVariablesAreNamedWithAnExample) {
  for (const std::string name : {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_WORKER",
                                 "DMLC_NUM_SERVER", "DMLC_WORKER_ID"}) {
    const std::string message = error_of(without(worker_env(), name));
    EXPECT_NE(message.find(name + " is not set"), std::string::npos) << message;
    EXPECT_NE(message.find("export " + name + "="), std::string::npos) << message;
    EXPECT_NE(error_of(with(worker_env(), name, "")), "") << name << " empty";
  }
}

TEST(NodeEnv, BadRoleNamesTheValueAndTheChoices) {
  EXPECT_EQ(error_of(with(worker_env(), "DMLC_ROLE", "wroker")),
            "DMLC_ROLE=\"wroker\": expected scheduler, server or worker");
  EXPECT_NE(error_of(with(worker_env(), "DMLC_ROLE", "Worker")), "");  // ps-lite is case-sensitive too
}

TEST(NodeEnv, BadPortsAreRefused) {
  EXPECT_EQ(error_of(with(worker_env(), "DMLC_PS_ROOT_PORT", "99999")),
            "DMLC_PS_ROOT_PORT=\"99999\": expected a port 1-65535, e.g. 1234");
  for (const std::string port : {"0", "-1", "abc", "12 34", "1234x", "65536", " 1234"})
    EXPECT_NE(
        error_of(with(worker_env(), "DMLC_PS_ROOT_PORT", port)).find("DMLC_PS_ROOT_PORT=\"" + port + "\""),
        std::string::npos)
        << port;
  EXPECT_EQ(parse_node_env(with(worker_env(), "DMLC_PS_ROOT_PORT", "65535")).root_port, 65535);
  EXPECT_EQ(parse_node_env(with(worker_env(), "DMLC_PS_ROOT_PORT", "1")).root_port, 1);
}

TEST(NodeEnv, BadAddressesAreRefused) {
  EXPECT_NE(error_of(with(worker_env(), "DMLC_PS_ROOT_URI", "127.0.0.1:1234")).find("no port"),
            std::string::npos);
  EXPECT_NE(error_of(with(worker_env(), "DMLC_PS_ROOT_URI", "tcp://127.0.0.1")), "");
  EXPECT_NE(error_of(with(worker_env(), "DMLC_NODE_HOST", "0.0.0.0")).find("DMLC_NODE_HOST=\"0.0.0.0\""),
            std::string::npos);
  EXPECT_NE(error_of(with(worker_env(), "DMLC_NODE_HOST", "*")), "");
  EXPECT_EQ(parse_node_env(with(worker_env(), "DMLC_PS_ROOT_URI", "sched.example")).root_uri,
            "sched.example");
}

TEST(NodeEnv, CountsMustBePositive) {
  EXPECT_NE(error_of(with(worker_env(), "DMLC_NUM_WORKER", "0")).find("DMLC_NUM_WORKER=\"0\""),
            std::string::npos);
  EXPECT_NE(error_of(with(worker_env(), "DMLC_NUM_SERVER", "two")).find("DMLC_NUM_SERVER=\"two\""),
            std::string::npos);
}

TEST(NodeEnv, WorkerIdMustBeARankOfTheJob) {
  const std::string message = error_of(with(worker_env(), "DMLC_WORKER_ID", "2"));
  EXPECT_NE(message.find("DMLC_WORKER_ID=\"2\""), std::string::npos) << message;
  EXPECT_NE(message.find("0..1"), std::string::npos) << message;
  EXPECT_NE(error_of(with(worker_env(), "DMLC_WORKER_ID", "-1")), "");
  EXPECT_EQ(parse_node_env(with(worker_env(), "DMLC_WORKER_ID", "0")).worker_id, 0);
}

TEST(NodeEnv, FlagsAndLevelsAreChecked) {
  EXPECT_EQ(error_of(with(worker_env(), "BYTEPS_ENABLE_ASYNC", "yes")),
            "BYTEPS_ENABLE_ASYNC=\"yes\": expected 0 or 1");
  EXPECT_NE(error_of(with(worker_env(), "BYTEPS_FORCE_DISTRIBUTED", "2")), "");
  EXPECT_EQ(error_of(with(worker_env(), "PS_VERBOSE", "3")), "PS_VERBOSE=\"3\": expected 0, 1 or 2");
  EXPECT_NE(error_of(with(worker_env(), "BYTEPS_LOG_LEVEL", "LOUD")).find("BYTEPS_LOG_LEVEL=\"LOUD\""),
            std::string::npos);
  EXPECT_NE(error_of(with(worker_env(), "BYTEPS_PARTITION_BYTES", "4MB")).find("BYTEPS_PARTITION_BYTES"),
            std::string::npos);
  EXPECT_NE(error_of(with(worker_env(), "BYTEPS_SERVER_ENGINE_THREAD", "0")), "");
}

TEST(NodeEnv, NicRateIsBytesPerSecondOrRefusedByName) {
  EXPECT_EQ(parse_node_env(worker_env()).nic_rate_Bps, 0);  // unset: no pacing
  EXPECT_EQ(parse_node_env(with(worker_env(), "PSTWIN_NIC_RATE", "125000000")).nic_rate_Bps, 125e6);
  for (const char* bad : {"1Gbps", "0", "-5", "1.5"}) {
    const auto error = error_of(with(worker_env(), "PSTWIN_NIC_RATE", bad));
    EXPECT_NE(error.find(std::string("PSTWIN_NIC_RATE=\"") + bad + "\""), std::string::npos) << error;
    EXPECT_NE(error.find("bytes per second"), std::string::npos) << error;
  }
}

TEST(NodeEnv, PacingIsTheVansOrTheKernelsByName) {
  EXPECT_FALSE(parse_node_env(worker_env()).kernel_pacing);  // unset: the van's own
  EXPECT_FALSE(parse_node_env(with(worker_env(), "PSTWIN_PACING", "user")).kernel_pacing);
  EXPECT_TRUE(parse_node_env(with(worker_env(), "PSTWIN_PACING", "kernel")).kernel_pacing);
  const auto error = error_of(with(worker_env(), "PSTWIN_PACING", "fq"));
  EXPECT_NE(error.find("PSTWIN_PACING=\"fq\""), std::string::npos) << error;
  EXPECT_NE(error.find("SO_MAX_PACING_RATE"), std::string::npos) << error;
}

// PSTWIN_ENCRYPT: curve or none; curve needs the token its keys come from and the van that has
// CURVE, and each refusal names what to set. A misspelled name is caught as every other one is.
TEST(Encryption, EnvironmentAsksForCurveOnlyWithATokenOnTheZmqVan) {
  const Env token = with(worker_env(), "PSTWIN_JOB_TOKEN", "a token of this job, 32 chars...");
  EXPECT_FALSE(parse_node_env(token).encrypt);  // unset: plain TCP
  EXPECT_FALSE(parse_node_env(with(token, "PSTWIN_ENCRYPT", "none")).encrypt);
  EXPECT_TRUE(parse_node_env(with(token, "PSTWIN_ENCRYPT", "curve")).encrypt);
  const auto unknown = error_of(with(token, "PSTWIN_ENCRYPT", "tls"));
  EXPECT_NE(unknown.find("PSTWIN_ENCRYPT=\"tls\": expected curve"), std::string::npos) << unknown;
  const auto no_token = error_of(with(worker_env(), "PSTWIN_ENCRYPT", "curve"));
  EXPECT_NE(no_token.find("PSTWIN_ENCRYPT=curve needs PSTWIN_JOB_TOKEN"), std::string::npos) << no_token;
  for (const std::string van : {"epoll", "ucx"}) {
    const auto error = error_of(with(with(token, "PSTWIN_ENCRYPT", "curve"), "DMLC_PS_VAN_TYPE", van));
    EXPECT_NE(error.find("DMLC_PS_VAN_TYPE=" + van), std::string::npos) << error;
    if (van_unavailable(Van::kUcx).empty() || van == "epoll") {
      EXPECT_NE(error.find("use the zmq van"), std::string::npos) << error;
    }
  }
  EXPECT_NE(name_error_of({{"PSTWIN_ENCRIPT", "curve"}}).find("did you mean PSTWIN_ENCRYPT?"),
            std::string::npos);
}

TEST(NodeEnv, HostNamesWhatIsLocalToAHost) {
  EXPECT_EQ(parse_node_env(worker_env()).host, "");  // unset: the machine's host name, at run time
  EXPECT_EQ(parse_node_env(with(worker_env(), "PSTWIN_HOST", "h1")).host, "h1");
  const auto error = error_of(with(worker_env(), "PSTWIN_HOST", std::string(65, 'h')));
  EXPECT_NE(error.find("PSTWIN_HOST=\"hhh"), std::string::npos) << error;
  EXPECT_NE(error.find("at most 64 characters"), std::string::npos) << error;
}

TEST(NodeEnv, JobStartIsTheSteadyClocksNanosecondsAndNeverLaterThanNow) {
  EXPECT_FALSE(parse_node_env(worker_env()).job_start_s);  // unset: the node's own start
  EXPECT_DOUBLE_EQ(*parse_node_env(with(worker_env(), "PSTWIN_JOB_START", "2500000000")).job_start_s, 2.5);
  for (const std::string bad : {"-1", "1.5", "soon", "9223372036854775807"}) {
    const auto error = error_of(with(worker_env(), "PSTWIN_JOB_START", bad));
    EXPECT_NE(error.find("PSTWIN_JOB_START=\"" + bad + "\""), std::string::npos) << error;
    EXPECT_NE(error.find("steady clock in nanoseconds"), std::string::npos) << error;
  }
}

TEST(NodeEnv, PartitionsAreTheNodesOrTheKernelsByName) {
  EXPECT_FALSE(parse_node_env(worker_env()).kernel_partitions);
  EXPECT_TRUE(parse_node_env(with(worker_env(), "PSTWIN_PARTITIONS", "kernel")).kernel_partitions);
  EXPECT_FALSE(parse_node_env(with(worker_env(), "PSTWIN_PARTITIONS", "van")).kernel_partitions);
  const auto error = error_of(with(worker_env(), "PSTWIN_PARTITIONS", "switch"));
  EXPECT_NE(error.find("PSTWIN_PARTITIONS=\"switch\""), std::string::npos) << error;
  EXPECT_NE(error.find("van (this node drops"), std::string::npos) << error;
}

TEST(NodeEnv, NicRateAutoIsReadFromTheInterfaceOfTheNodesAddress) {
  const auto env = parse_node_env(with(worker_env(), "PSTWIN_NIC_RATE", "auto"));
  EXPECT_TRUE(env.nic_rate_auto);
  EXPECT_EQ(env.nic_rate_Bps, 0);  // resolved when the node starts
  EXPECT_NE(error_of(with(worker_env(), "PSTWIN_NIC_RATE", "AUTO")).find("or auto"), std::string::npos);

  EXPECT_EQ(interface_of("127.0.0.1"), "lo");
  EXPECT_EQ(interface_of("192.0.2.1"), "");  // TEST-NET-1: no machine holds it
  EXPECT_EQ(interface_of("not-an-address"), "");

  // A sysfs tree of our own: what the kernel reports for a 10 Gb/s NIC, a down link, and garbage.
  const auto root = std::filesystem::temp_directory_path() / ("pstwin_sysfs_" + std::to_string(::getpid()));
  const auto write = [&](const std::string& interface, const std::string& text) {
    std::filesystem::create_directories(root / interface);
    std::ofstream(root / interface / "speed") << text;
  };
  write("eth0", "10000\n");
  write("down0", "-1\n");
  write("odd0", "fast\n");
  EXPECT_EQ(interface_speed_Bps(root, "eth0"), 1.25e9);
  EXPECT_FALSE(interface_speed_Bps(root, "down0").has_value());
  EXPECT_FALSE(interface_speed_Bps(root, "odd0").has_value());
  EXPECT_FALSE(interface_speed_Bps(root, "missing0").has_value());
  // Loopback reports no speed (the real /sys/class/net/lo/speed cannot be read): a clear error.
  try {
    resolve_nic_rate("127.0.0.1");
    ADD_FAILURE() << "loopback has no speed";
  } catch (const NodeEnvError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("PSTWIN_NIC_RATE=auto: interface lo (127.0.0.1) reports no link speed"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("bytes per second instead"), std::string::npos) << text;
  }
  EXPECT_THROW(resolve_nic_rate("192.0.2.1"), NodeEnvError);
  write("lo", "1000\n");  // the same lookup against our tree: 1 Gb/s
  EXPECT_EQ(resolve_nic_rate("127.0.0.1", root), 125e6);
  std::filesystem::remove_all(root);
}

TEST(NodeEnv, ErrorsAreScenarioErrors) {
  // The CLI maps ScenarioError to exit status 2 (bad configuration).
  EXPECT_THROW(parse_node_env({}), ScenarioError);
}

TEST(NodeEnv, OverridesApplyToTheScenario) {
  Env vars = worker_env();
  vars["DMLC_NUM_WORKER"] = "3";
  vars["BYTEPS_PARTITION_BYTES"] = "512000";
  vars["BYTEPS_ENABLE_ASYNC"] = "1";
  vars["BYTEPS_SERVER_ENGINE_THREAD"] = "2";
  const NodeEnv env = parse_node_env(vars);
  const Scenario sc = load_scenario(PSTWIN_SOURCE_DIR "/scenarios/quickstart.toml", env.scenario_overrides());
  EXPECT_EQ(sc.roles.workers, 3);
  EXPECT_EQ(sc.roles.servers, 1);
  EXPECT_EQ(sc.ps.partition_bytes, 512000u);
  EXPECT_EQ(sc.ps.mode, TrainingMode::kAsync);
  EXPECT_EQ(sc.ps.server_engine_threads, 2);
  // Unset tuning variables leave the scenario's values alone.
  const Scenario plain = load_scenario(PSTWIN_SOURCE_DIR "/scenarios/quickstart.toml",
                                       parse_node_env(worker_env()).scenario_overrides());
  EXPECT_EQ(plain.ps.mode, TrainingMode::kSync);
  EXPECT_EQ(plain.ps.server_engine_threads, 4);
}

}  // namespace
}  // namespace pstwin::realnet
