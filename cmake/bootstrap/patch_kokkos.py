#!/usr/bin/env python3
"""zerosync's own edits to Kokkos 3.4.01 so that it builds with CUDA 13 and targets Hopper.

Usage: patch_kokkos.py KOKKOS_SOURCE_DIR

Each edit names the text it expects; if that text is missing (another Kokkos version) the
script stops and says which edit failed, instead of building something half-patched.
Applying twice is harmless: an edit whose result is already present is skipped.
"""
import pathlib
import sys

EDITS = [
    # 1. Kokkos 3.4 knows no Hopper: add a HOPPER90 arch option mapped to sm_90, so that the
    #    compiled arch matches the H100/H200 and Kokkos' start-up arch check passes.
    ("cmake/kokkos_arch.cmake",
     'KOKKOS_ARCH_OPTION(AMPERE86        GPU  "NVIDIA Ampere generation CC 8.6")\n',
     'KOKKOS_ARCH_OPTION(AMPERE86        GPU  "NVIDIA Ampere generation CC 8.6")\n'
     'KOKKOS_ARCH_OPTION(HOPPER90        GPU  "NVIDIA Hopper generation CC 9.0")\n'),
    ("cmake/kokkos_arch.cmake",
     "CHECK_CUDA_ARCH(AMPERE86  sm_86)\n",
     "CHECK_CUDA_ARCH(AMPERE86  sm_86)\nCHECK_CUDA_ARCH(HOPPER90  sm_90)\n"),
    ("cmake/KokkosCore_config.h.in",
     "#cmakedefine KOKKOS_ARCH_AMPERE86\n",
     "#cmakedefine KOKKOS_ARCH_AMPERE86\n#cmakedefine KOKKOS_ARCH_HOPPER90\n"),
    # 2. The half_t <-> __half conversions do not compile against CUDA 13's cuda_fp16.h.
    #    zerosync uses no half precision: without this specialisation half_t falls back to float.
    ("core/src/Cuda/Kokkos_Cuda_Half.hpp",
     "#if !(defined(KOKKOS_COMPILER_CLANG) && KOKKOS_COMPILER_CLANG < 900) && \\\n",
     "#if 0 /* zerosync: disabled for CUDA 13 */ && \\\n"
     "    !(defined(KOKKOS_COMPILER_CLANG) && KOKKOS_COMPILER_CLANG < 900) && \\\n"),
    # 3. CUDA 13 changed cudaMemPrefetchAsync to take a cudaMemLocation and flags.
    ("core/src/Cuda/Kokkos_CudaSpace.cpp",
     "    CUDA_SAFE_CALL(cudaMemPrefetchAsync(ptr, bytes, space.cuda_device(),\n"
     "                                        space.cuda_stream()));\n",
     "#if CUDA_VERSION >= 13000\n"
     "    cudaMemLocation loc{};\n"
     "    loc.type = cudaMemLocationTypeDevice;\n"
     "    loc.id   = space.cuda_device();\n"
     "    CUDA_SAFE_CALL(cudaMemPrefetchAsync(ptr, bytes, loc, 0, space.cuda_stream()));\n"
     "#else\n"
     "    CUDA_SAFE_CALL(cudaMemPrefetchAsync(ptr, bytes, space.cuda_device(),\n"
     "                                        space.cuda_stream()));\n"
     "#endif\n"),
    # 4. nvcc_wrapper's default sm_35 is rejected by CUDA 13; CMake's compiler check runs the
    #    wrapper before any Kokkos flag is known, so the default itself must be a valid arch.
    ("bin/nvcc_wrapper", 'default_arch="sm_35"\n', 'default_arch="sm_90"\n'),
    # 5. The installed KokkosConfig.cmake freezes the CUDA targets' paths as found at build
    #    time (and writes a multi-directory include list as one path). Let a consumer find its
    #    own CUDA toolkit first; the frozen copies are then skipped (they are guarded by
    #    IF(NOT TARGET ...)). This makes the install usable on a machine whose CUDA differs.
    ("cmake/KokkosConfig.cmake.in",
     "@KOKKOS_TPL_EXPORTS@\n",
     "IF(NOT TARGET CUDA::cudart)\n  FIND_PACKAGE(CUDAToolkit QUIET)\nENDIF()\n@KOKKOS_TPL_EXPORTS@\n"),
    # 6. A functor over 512 bytes is launched through constant memory, guarded by a
    #    cudaEventSynchronize that makes CUDA stream capture fail (seen on the H200: the C51
    #    loss functor). Pass every functor that fits the 4 KB kernel-argument limit by value,
    #    as the light-weight hint does; larger ones still go through global memory.
    ("core/src/Cuda/Kokkos_Cuda_KernelLaunch.hpp",
     "      (sizeof(DriverType) < CudaTraits::ConstantMemoryUseThreshold)\n"
     "          ? Experimental::CudaLaunchMechanism::LocalMemory\n",
     "      (sizeof(DriverType) < CudaTraits::KernelArgumentLimit)\n"
     "          ? Experimental::CudaLaunchMechanism::LocalMemory\n"),
    # 7. A team may have more than 48 KiB of scratch: a CUDA kernel can opt in to up to
    #    sharedMemPerBlockOptin (227 KiB on Hopper) of dynamic shared memory, but Kokkos 3.4
    #    caps a team at sharedMemPerBlock (48 KiB) and never opts in. Raise the cap, count the
    #    opt-in limit when it sizes teams, and opt a kernel in before a launch that asks for
    #    more than 48 KiB (launches only; Kokkos' own graph nodes are left as they were).
    ("core/src/Cuda/Kokkos_Cuda_Instance.cpp",
     "    m_maxShmemPerBlock = cudaProp.sharedMemPerBlock;\n",
     "    m_maxShmemPerBlock = cudaProp.sharedMemPerBlockOptin;\n"),
    ("core/src/Cuda/Kokkos_Cuda_BlockSize_Deduction.hpp",
     "  size_t const shmem_per_block         = properties.sharedMemPerBlock;\n"
     "  size_t const static_shmem            = attributes.sharedSizeBytes;\n"
     "  size_t const dynamic_shmem_per_block = attributes.maxDynamicSharedSizeBytes;\n",
     "  size_t const shmem_per_block         = properties.sharedMemPerBlockOptin;\n"
     "  size_t const static_shmem            = attributes.sharedSizeBytes;\n"
     "  size_t const dynamic_shmem_per_block =\n"
     "      properties.sharedMemPerBlockOptin - attributes.sharedSizeBytes;\n"),
    ("core/src/Cuda/Kokkos_Cuda_KernelLaunch.hpp",
     "inline void check_shmem_request(CudaInternal const* cuda_instance, int shmem) {\n",
     "template <class KernelFuncPtr>\n"
     "inline void opt_in_shmem(KernelFuncPtr const& func, int shmem) {\n"
     "  if (shmem > 48 * 1024)\n"
     "    CUDA_SAFE_CALL(cudaFuncSetAttribute(\n"
     "        func, cudaFuncAttributeMaxDynamicSharedMemorySize, shmem));\n"
     "}\n"
     "\n"
     "inline void check_shmem_request(CudaInternal const* cuda_instance, int shmem) {\n"),
    ("core/src/Cuda/Kokkos_Cuda_KernelLaunch.hpp",
     "      Impl::check_shmem_request(cuda_instance, shmem);\n"
     "\n"
     "      // If a desired occupancy is specified,",
     "      Impl::check_shmem_request(cuda_instance, shmem);\n"
     "      Impl::opt_in_shmem(base_t::get_kernel_func(), shmem);\n"
     "\n"
     "      // If a desired occupancy is specified,"),
]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1])
    if not (root / "core/src/Kokkos_Core.hpp").is_file():
        print(f"patch_kokkos: '{root}' is not a Kokkos source tree (no core/src/Kokkos_Core.hpp)",
              file=sys.stderr)
        return 1
    for rel, old, new in EDITS:
        path = root / rel
        text = path.read_text()
        if new in text:
            continue
        if text.count(old) != 1:
            print(f"patch_kokkos: edit of {rel} failed: expected exactly one occurrence of\n{old}"
                  f"found {text.count(old)}; is this Kokkos 3.4.01?", file=sys.stderr)
            return 1
        path.write_text(text.replace(old, new))
        print(f"patch_kokkos: patched {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
