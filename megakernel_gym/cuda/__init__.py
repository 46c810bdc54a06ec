"""The GPU plumbing at the bottom of the package, which the compiler and the judge both use: CUDA C
compiled by NVRTC and loaded as modules (nvrtc.py, with the compile run in a child process under a time
limit: nvrtc_child.py), and device-time measurement (timing.py). It imports nothing else of
megakernel_gym but cache_paths.
"""
