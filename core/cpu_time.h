#pragma once
// CPU clocks of the process, for measurements that must not depend on how much of the machine a
// run got (docs/gates.md, "How latency is gated").
namespace kvgate {

// The process's CPU time (user + system, every thread), in seconds.
double process_cpu_seconds();

// The process's CPU time less what its thread pools spent polling for hand-offs
// (ThreadPool::polled_seconds): the CPU its work took. On a busy machine a fork-join's threads
// wait for each other far more often (the scheduler takes one away in the middle of a hand-off),
// and polling turns that wait into CPU time; net of it, CPU time counts the work alone.
double work_cpu_seconds();

}  // namespace kvgate
