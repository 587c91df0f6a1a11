// The library's own version, compiled in: compared with the headers' by
// version_matches_headers().
#include "convgraph/version.hpp"

namespace convgraph {

const char* version() { return CONVGRAPH_VERSION_STRING; }

}  // namespace convgraph
