// what: the return value converts to the function's return type (float)
// verdict: value 0.10000000149011612
#include <torch/extension.h>
float f(torch::Tensor x) {
    return 0.1;
}
