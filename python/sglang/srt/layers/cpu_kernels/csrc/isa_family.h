// The kernel family this library is built for: build.py passes exactly one
// -DSGLANG_ISA_<FAMILY> with that family's compiler flags (isa.py), so each
// family is its own library and the choice among them is made at run time.
#pragma once
#if defined(SGLANG_ISA_AVX512_VNNI) || defined(SGLANG_ISA_AMX)
#include "isa_avx512_vnni.h"
#elif defined(SGLANG_ISA_AVX2)
#include "isa_avx2.h"
#else
#error "build with one kernel family: -DSGLANG_ISA_AVX2, -DSGLANG_ISA_AVX512_VNNI or -DSGLANG_ISA_AMX and its flags (sglang/srt/layers/cpu_kernels/isa.py)"
#endif
