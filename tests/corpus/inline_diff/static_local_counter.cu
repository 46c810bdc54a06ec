// what: a static local keeps its value across calls
// verdict: refused static local calls
// native: 1
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    static int calls = 0;
    calls++;
    return calls;
}
