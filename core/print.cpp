// debugprint (Theano-style indented text) and Graphviz DOT export.
#include "convgraph/core/print.hpp"

#include <sstream>
#include <string_view>
#include <unordered_set>

#include "core/utf8.hpp"

namespace convgraph {

namespace {

/// Text for a double-quoted DOT label that Graphviz shows as written: quotes and
/// backslashes escaped (a backslash starts DOT's own escapes: \n, \l, \N...), '&' as
/// "&amp;" (Graphviz decodes entities in labels), a line break as DOT's \n; other
/// control characters and bytes that are not UTF-8 (which Graphviz rejects) are shown as
/// the text \xHH.
std::string dot_escape(std::string_view s) {
  std::string out;
  auto hex = [&](unsigned char c) {
    constexpr char digits[] = "0123456789abcdef";
    out += "\\\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '&') {
      out += "&amp;";  // Graphviz reads entities (&amp; &#65;) in labels
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += '\t';
    } else if (c < 0x20 || c == 0x7f) {
      hex(c);
    } else if (c >= 0x80) {
      const std::size_t n = detail::utf8_length(s.substr(i));
      if (n == 0) {
        hex(c);
      } else {
        out.append(s.substr(i, n));
        i += n;
        continue;
      }
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

std::string head(const Var& v) {
  std::ostringstream os;
  if (v.op()) os << v.op()->label();
  else if (v.is_constant()) {
    const Tensor* t = v.constant_value();
    os << "Constant";
    if (t->numel() == 1 && t->device() == DeviceKind::cpu && t->dtype() != DType::float16 && t->dtype() != DType::bfloat16)
      os << "{" << t->get(0) << "}";
  } else os << (v.is_shared() ? "Shared" : "Input");
  if (!v.name().empty()) os << " '" << v.name() << "'";
  os << " #" << v.node()->id << " " << v.type().to_string();
  if (v.op()) {
    const std::string impl = v.op()->implementation();
    if (!impl.empty()) os << " [" << impl << "]";
  }
  return os.str();
}

void print_tree(const Var& v, int depth, std::unordered_set<const Node*>& seen, std::ostringstream& os) {
  os << std::string(static_cast<std::size_t>(depth) * 2, ' ') << (depth ? "|" : "");
  if (seen.count(v.node()) && !v.inputs().empty()) {
    os << "*#" << v.node()->id << " (" << (v.op() ? v.op()->name() : "") << ", printed above)\n";
    return;
  }
  seen.insert(v.node());
  os << head(v) << '\n';
  for (const auto& in : v.inputs()) print_tree(in, depth + 1, seen, os);
}

}  // namespace

std::string debugprint(const std::vector<Var>& outputs) {
  std::ostringstream os;
  std::unordered_set<const Node*> seen;
  for (const auto& o : outputs) {
    if (!o.defined()) throw ValueError("debugprint: undefined variable");
    print_tree(o, 0, seen, os);
  }
  return os.str();
}

std::string debugprint(const Var& output) { return debugprint(std::vector<Var>{output}); }
std::string debugprint(const FunctionGraph& graph) { return debugprint(graph.outputs()); }

std::string to_dot(const std::vector<Var>& outputs) {
  std::ostringstream os;
  os << "digraph convgraph {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  for (const auto& v : topological_order(outputs)) {
    const bool gpu = v.type().device == DeviceKind::cuda;
    std::string shape = v.op() ? "box" : "ellipse";
    std::string color = !v.op() ? (v.is_constant() ? "gray90" : "palegreen")
                        : v.op()->is_abstract() ? "orange" : gpu ? "lightskyblue" : "lightyellow";
    // Each part is escaped on its own; the "\n" between them are DOT's line breaks.
    std::string label =
        dot_escape(v.op() ? v.op()->label() : v.is_constant() ? "Constant" : v.is_shared() ? "Shared" : "Input");
    if (!v.name().empty()) label += "\\n'" + dot_escape(v.name()) + "'";
    label += "\\n" + dot_escape(v.type().to_string());
    if (v.op() && !v.op()->implementation().empty()) label += "\\n[" + dot_escape(v.op()->implementation()) + "]";
    os << "  n" << v.node()->id << " [shape=" << shape << ", style=filled, fillcolor=" << color << ", label=\""
       << label << "\"];\n";
    for (std::size_t i = 0; i < v.inputs().size(); ++i)
      os << "  n" << v.inputs()[i].node()->id << " -> n" << v.node()->id << " [label=\"" << i << "\"];\n";
  }
  os << "}\n";
  return os.str();
}

std::string to_dot(const FunctionGraph& graph) { return to_dot(graph.outputs()); }

}  // namespace convgraph
