// what: std::vector assignment copies
// verdict: value 2
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    std::vector<int64_t> a = {1, 2};
    std::vector<int64_t> b;
    b = a;
    b.push_back(3);
    return a.size();
}
