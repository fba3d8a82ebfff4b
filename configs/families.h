// The families compiled into attnzoo, one factory each; model_family.cpp lists them. Internal to
// configs/.
#pragma once

#include <attnzoo/configs/model_family.h>

#include <memory>

namespace attnzoo {

std::unique_ptr<ModelFamily> make_vit_family();
std::unique_ptr<ModelFamily> make_conformer_family();
std::unique_ptr<ModelFamily> make_ast_family();

}  // namespace attnzoo
