// what: case labels fall through until break
// verdict: value 110
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int k = 1, r = 0;
    switch (k) {
        case 0: r += 1;
        case 1: r += 10;
        case 2: r += 100; break;
        default: r += 1000;
    }
    return r;
}
