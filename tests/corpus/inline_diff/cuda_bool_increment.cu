// what: nvcc's front end only warns that ++ on a bool is deprecated, then g++ refuses the code it generates
// verdict: error in ‘operator++’ is forbidden
#include <torch/extension.h>
bool f(torch::Tensor x) {
    bool b = false;
    b++;
    return b;
}
