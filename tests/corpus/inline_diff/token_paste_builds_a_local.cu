// what: ## joins tokens into one name
// verdict: value 7
#include <torch/extension.h>
#define CAT(a, b) a##b
int64_t f(torch::Tensor x) {
    int64_t CAT(my, val) = 7;
    return myval;
}
