// orrery-ckpt: the checkpoint subcommands of orrery-worker as a small standalone,
// torch-free binary (inspect and reshard need no LibTorch).
#include "worker/checkpoint/cli.h"

int main(int argc, char** argv) { return orrery::checkpoint::RunCheckpointCommand(argc, argv); }
