// What a whole job observes, the same in both backends: the invariant checks, the run record and
// the accuracy of the trained model, behind one fanout the protocol reports to.
#pragma once

#include <memory>

#include "ps/invariants.hpp"
#include "ps/observer.hpp"
#include "ps/training.hpp"
#include "ps/workload.hpp"
#include "report/accuracy_recorder.hpp"
#include "report/breakdown.hpp"
#include "report/run_recorder.hpp"
#include "report/run_report.hpp"
#include "report/selection_recorder.hpp"
#include "report/staleness_recorder.hpp"
#include "report/validation_recorder.hpp"

namespace pstwin {

class RunObservers {
 public:
  // `model` (null for the synthetic workload) must outlive this object: its accuracy is evaluated at the
  // end of the run.
  RunObservers(const Scenario& sc, const TrainingModel* model)
      : sc_(sc), workload(sc), checker(sc, workload), recorder(sc, workload), training(model) {}
  RunObservers(const RunObservers&) = delete;
  RunObservers& operator=(const RunObservers&) = delete;

  // After every node stopped: end-of-run checks, the run record, the accuracy (evaluated now, so it is
  // in no iteration's time).
  void finish_run(RunReport& report) {
    checker.finish(report.completed);
    if (!report.completed) checker.add({"run", report.failure});
    recorder.fill(report);
    if (training) report.accuracy = accuracy.evaluate(*training);
    if (sc_.roles.validators > 0) report.validation = validation.summary();
    if (selection.judged_any()) report.selection = selection.summary();
    if (sc_.ps.max_staleness > 0) report.staleness = staleness.summary();
  }
  // Last, once nothing adds a check any more.
  void fold_invariants(RunReport& report) const {
    report.invariants_checked = checker.checked();
    report.violation_count = checker.violation_count();
    report.violations = checker.violations();
    report.invariant_tallies = checker.tallies();
  }

  const Scenario& sc_;
  SyntheticWorkload workload;
  InvariantChecker checker;
  RunRecorder recorder;
  const TrainingModel* training;  // null: synthetic workload
  AccuracyRecorder accuracy;
  ValidationRecorder validation;
  SelectionRecorder selection{sc_.zeno.rule};
  StalenessRecorder staleness{static_cast<std::uint64_t>(sc_.ps.max_staleness)};
  BreakdownRecorder breakdown;  // fed spans by the simulator only
  ObserverFanout fanout{{&checker, &recorder, &accuracy, &validation, &selection, &staleness, &breakdown}};
};

}  // namespace pstwin
