// OmegaConf's interpolations in a YAML document (the configs NeMo writes and reads), resolved as
// OmegaConf.to_container(resolve=True) resolves them, so that attnzoo reads the values NeMo
// would:
//   ${a.b.c}     the value at that path from the document's root (a whole map or list too);
//   ${a.list[0]} ${a.list.0}   a list element;
//   ${.x} ${..x}  relative: the node's own map, one level up for each further dot;
//   "s_${a}_t"   a string with interpolations inside (scalars joined as text; true/false and
//                null as Python prints them, True / False / None);
//   ${a.${b}}    an interpolation in a key, resolved first;
//   \${a}        a literal "${a}".
// Resolvers (${oc.env:HOME}, ${now:...}) are refused by name: attnzoo runs none. A path that
// does not exist, a value still ??? (OmegaConf's MISSING), a cycle, or malformed syntax is a
// ConfigError naming the file, the key that holds the interpolation and what is wrong. Each
// node is resolved once and the result shares repeated parts; the result counted with every
// repetition is bounded (a million nodes), so a document of interpolations that double at each
// step is an error, not an exponential walk for whoever reads it. Internal to configs/.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace attnzoo::detail {

YAML::Node resolve_interpolations(const YAML::Node& root, const std::string& file);

}  // namespace attnzoo::detail
