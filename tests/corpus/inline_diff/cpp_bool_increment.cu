// what: g++ refuses ++ on a bool (C++17 removed it)
// verdict: error in ‘operator++’ is forbidden
// file: cpp
#include <torch/extension.h>
bool f(torch::Tensor x) {
    bool b = false;
    b++;
    return b;
}
