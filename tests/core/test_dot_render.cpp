// to_dot() through Graphviz: the text must render with `dot -Tsvg` without a warning, and
// every label line, hostile names included, must come out of the SVG as written.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace convgraph;
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Render {
  int status = -1;
  std::string svg, errors;
};

/// Runs Graphviz's `dot -Tsvg` on `dot_text`.
Render render_svg(const std::string& dot_text) {
  const fs::path dir = fs::temp_directory_path() / ("convgraph_dot_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "g.dot", std::ios::binary) << dot_text;
  const std::string cmd = "dot -Tsvg '" + (dir / "g.dot").string() + "' > '" + (dir / "g.svg").string() + "' 2> '" +
                          (dir / "err.txt").string() + "'";
  Render r;
  r.status = std::system(cmd.c_str());
  r.svg = read_file(dir / "g.svg");
  r.errors = read_file(dir / "err.txt");
  fs::remove_all(dir);
  return r;
}

void append_utf8(std::string& out, unsigned long cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

/// XML character data with its entities decoded (the five named ones and &#N; / &#xN;).
std::string xml_decode(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::size_t semi = s[i] == '&' ? s.find(';', i) : std::string::npos;
    if (semi == std::string::npos) {
      out += s[i];
      continue;
    }
    const std::string e = s.substr(i + 1, semi - i - 1);
    if (e == "amp") out += '&';
    else if (e == "lt") out += '<';
    else if (e == "gt") out += '>';
    else if (e == "quot") out += '"';
    else if (e == "apos") out += '\'';
    else if (e.size() > 1 && e[0] == '#')
      append_utf8(out, e[1] == 'x' ? std::stoul(e.substr(2), nullptr, 16) : std::stoul(e.substr(1)));
    else FAIL("unknown XML entity &" << e << ";");
    i = semi;
  }
  return out;
}

/// The decoded text of every <text> element of an SVG, in document order.
std::vector<std::string> svg_texts(const std::string& svg) {
  std::vector<std::string> out;
  for (std::size_t p = svg.find("<text"); p != std::string::npos; p = svg.find("<text", p + 1)) {
    const std::size_t open_end = svg.find('>', p), close = svg.find("</text>", p);
    REQUIRE(open_end < close);
    REQUIRE(close != std::string::npos);
    out.push_back(xml_decode(svg.substr(open_end + 1, close - open_end - 1)));
  }
  return out;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("printing: to_dot renders through Graphviz, hostile names shown as written", "[core][print][dot]") {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    WARN("SKIPPED: Graphviz's dot is not installed (Debian package graphviz)");
    return;
  }
  // Each name: what the user wrote, and the lines Graphviz must show for "'name'".
  const std::vector<std::pair<std::string, std::vector<std::string>>> names = {
      {"say \"hi\"", {"'say \"hi\"'"}},
      {"back\\slash \\N \\n \\", {"'back\\slash \\N \\n \\'"}},
      {"two\nlines", {"'two", "lines'"}},
      {"tab\there", {"'tab\there'"}},
      {"<b>&amp; &#65;</b>", {"'<b>&amp; &#65;</b>'"}},
      {"\xc3\xbcn\xc3\xaf \xe6\xbc\xa2\xe5\xad\x97 \xf0\x9f\x98\x80", {"'\xc3\xbcn\xc3\xaf \xe6\xbc\xa2\xe5\xad\x97 \xf0\x9f\x98\x80'"}},
      {"ctl\x01 bad\xff", {"'ctl\\x01 bad\\xff'"}},
  };
  std::vector<Var> outputs;
  Var acc = input(DType::float32, {2, 2}, "start");
  for (const auto& [name, lines] : names) acc = acc + input(DType::float32, {2, 2}, name);
  // An op whose label carries a user string too (the convolution's name parameter).
  Var x = input(DType::float32, {1, 1, 4, 4}, "x \"img\"");
  Var w = input(DType::float32, {1, 1, 3, 3}, "w\\");
  outputs.push_back(exp(acc).named("out\n\"final\" & <done>"));
  outputs.push_back(conv2d(x, w, {.name = "conv \"1\"\n<&>\\"}));

  const std::string dot = to_dot(outputs);
  const Render r = render_svg(dot);
  INFO("DOT text:\n" << dot << "\ndot stderr:\n" << r.errors);
  REQUIRE(r.status == 0);
  CHECK(r.errors.empty());  // not even a warning (a bad byte or charset would warn)
  REQUIRE_THAT(r.svg, Catch::Contains("</svg>"));

  const std::vector<std::string> texts = svg_texts(r.svg);
  auto shown = [&](const std::string& line) { return std::find(texts.begin(), texts.end(), line) != texts.end(); };
  for (const auto& [name, lines] : names)
    for (const auto& line : lines) {
      INFO("name " << name << ": line " << line);
      CHECK(shown(line));
    }
  CHECK(shown("'out"));
  CHECK(shown("\"final\" & <done>'"));
  CHECK(shown("'x \"img\"'"));
  CHECK(shown("'w\\'"));
  // One SVG node per graph node, one edge per input; no label lost its line breaks.
  const std::size_t nodes = topological_order(outputs).size();
  CHECK(count(r.svg, "class=\"node\"") == nodes);
  CHECK(count(dot, " -> ") == count(r.svg, "class=\"edge\""));
  for (const auto& t : texts)
    if (t != names[1].second[0]) CHECK(t.find("\\n") == std::string::npos);
}
