// what: a libc function declared to the linker
// verdict: refused extern declaration
// native: 1
#include <torch/extension.h>
extern "C" int getpid(void);
int64_t f(torch::Tensor x) {
    return getpid() > 0;
}
