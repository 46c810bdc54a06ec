// what: do-while
// verdict: value 10
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int i = 0, n = 0;
    do {
        n += i;
        i++;
    } while (i < 5);
    return n;
}
