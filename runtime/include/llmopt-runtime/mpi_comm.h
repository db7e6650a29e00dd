//===- mpi_comm.h - collectives over MPI -----------------------------*- C++ -*-===//

#ifndef LLMOPT_RUNTIME_MPI_COMM_H
#define LLMOPT_RUNTIME_MPI_COMM_H

#include "llmopt-runtime/comm.h"

#include <memory>

namespace llmopt::runtime {

/// True when the runtime was built with MPI.
bool haveMPI();
/// Initializes MPI (once) and returns a communicator over MPI_COMM_WORLD, or
/// null with `error` set.
std::unique_ptr<Communicator> makeMPICommunicator(int *argc, char ***argv, std::string &error);
/// Ends the whole job at once (a failed rank takes the others down instead of
/// leaving them blocked in a collective).
[[noreturn]] void abortAll(int code);
void finalizeMPI();

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_MPI_COMM_H
