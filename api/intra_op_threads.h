// LibTorch's CPU ops run on OpenMP (GNU libgomp in the PyPI wheel), and every thread that starts
// a parallel region gets a team of OpenMP threads of its own. Once the process holds more OpenMP
// threads than there are cores, libgomp stops letting idle team threads spin between regions and
// puts them to sleep instead, and every parallel region then pays for waking them: a model run on
// a second thread after the first has used its own team was about 35% slower on two cores, and
// two data-loading threads beside a training loop slowed it fivefold.
//
// A program that calls the models from several threads should therefore let one thread (or as
// many as there are cores to spare) run the parallel ops, and call use_one_intra_op_thread() at
// the start of the others (I/O threads that decode and preprocess, data loaders, streams of
// their own): their ops then run on the calling thread alone and start no team.
#pragma once

namespace attnzoo {

// The calling thread's LibTorch CPU ops run on `threads` threads from now on (the thread's
// OpenMP thread count, set after ATen's per-thread initialisation that would reset it; the
// calling thread and threads − 1 of its team). Other threads are unaffected. Does nothing with a
// LibTorch built without OpenMP. threads < 1 counts as 1.
void use_intra_op_threads(int threads);

// use_intra_op_threads(1): the calling thread's ops run on it alone and start no team.
void use_one_intra_op_thread();

}  // namespace attnzoo
