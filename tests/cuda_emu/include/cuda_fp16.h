// cuda_emu stand-in for <cuda_fp16.h>: see ../emu_half.h.
#pragma once

#include "../cuda_emu.h"
#include "../emu_half.h"
