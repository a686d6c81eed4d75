#include "harness/report/report_html.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "harness/report/depth_accuracy.h"
#include "harness/report/position_report.h"
#include "harness/stored_scores.h"
#include "scoring/aggregate.h"
#include "scoring/metrics.h"

namespace kvgate::harness {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Colour-blind-safe (Okabe–Ito) palette, then Paul Tol's muted colours, so a run of up to 16
// configs gives each its own; configs keep their colour across every chart.
constexpr const char* kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9",
                                    "#F0E442", "#000000", "#882255", "#44AA99", "#999933", "#332288",
                                    "#AA4499", "#117733", "#88CCEE", "#DDCC77"};


std::string num(double v, int digits = 4) {
  return std::isfinite(v) ? fmt::format("{:.{}g}", v, digits) : std::string("-");
}

struct ConfigStats {
  std::string spec;
  std::string label;  // as the user typed it: what tables show
  std::string chart;  // what charts show: the label less the prefix every config's label shares
  results::ConfigRole role = results::ConfigRole::candidate;
  std::string color;
  double bits = kNaN, kv_bytes = kNaN;
  scoring::ItemAggregate quality;
  scoring::LatencyAggregate latency;
};

struct DomainStats {
  scoring::ItemAggregate quality;
  double baseline_kld_mean = kNaN;  // paired: the same items in the baseline run
  int64_t paired = 0;
};

struct MovedItem {
  std::string item_key, domain, spec;
  double baseline = 0, candidate = 0;
};

struct Analysis {
  std::vector<ConfigStats> configs;  // reference first, as the store orders them
  std::map<std::string, size_t> config_index;
  std::set<std::string> domains;
  std::map<std::pair<std::string, std::string>, DomainStats> by_domain;  // (domain, spec)
  std::map<std::string, std::map<int64_t, double>> drift;  // spec -> turn -> mean over sessions of the turn's mean KLD
  int64_t sessions = 0;
  std::vector<MovedItem> moved;
  scoring::GoldSignal gold;  // the reference's gold answers over the run: whether accuracy says anything
  std::string reference_spec;
  PositionView positions;  // candidates' quality by position, with intervals over documents and the depth effect
  DepthAccuracy depth_accuracy;  // gold accuracy by the depth of the evidence (needles at controlled depths)
  // What every config's label starts with, left out of the charts ("" when nothing worth it).
  std::string chart_prefix;
  // A config's label (what tables show) from its spec.
  std::string label(const std::string& spec) const {
    const auto it = config_index.find(spec);
    return it == config_index.end() ? spec : configs[it->second].label;
  }
  // A config's name in the charts from its spec.
  std::string chart_label(const std::string& spec) const {
    const auto it = config_index.find(spec);
    return it == config_index.end() ? spec : configs[it->second].chart;
  }
};

// The prefix that all `labels` share, ending just after a separator ('+' between weights and
// KV, '/', '-', '_', ':', '.', ' '), when it is long enough to crowd a chart (ten configs typed
// as "Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf+SPEC" differ only after 40 characters) and every
// label keeps something after it; else "".
std::string shared_label_prefix(const std::vector<std::string>& labels) {
  if (labels.size() < 2) return "";
  size_t n = labels.front().size();
  for (const std::string& l : labels) {
    size_t k = 0;
    while (k < n && k < l.size() && l[k] == labels.front()[k]) ++k;
    n = k;
  }
  while (n > 0 && std::string_view("+/-_:. ").find(labels.front()[n - 1]) == std::string_view::npos) --n;
  for (const std::string& l : labels)
    if (l.size() <= n) return "";
  return n >= 12 ? labels.front().substr(0, n) : "";
}

Analysis analyze(const ReportInput& in) {
  Analysis a;
  std::map<int64_t, std::string> spec_of;
  for (const results::RunConfigRecord& c : in.run.configs) {
    ConfigStats s;
    s.spec = c.spec;
    s.label = c.label.empty() ? c.spec : c.label;
    s.role = c.role;
    s.bits = c.bits_per_element;
    s.kv_bytes = c.kv_bytes_per_token;
    s.color = kPalette[a.configs.size() % std::size(kPalette)];
    a.config_index[c.spec] = a.configs.size();
    spec_of[c.config_id] = c.spec;
    a.configs.push_back(s);
  }
  std::vector<std::string> labels;
  for (const ConfigStats& c : a.configs) labels.push_back(c.label);
  a.chart_prefix = shared_label_prefix(labels);
  for (ConfigStats& c : a.configs) c.chart = c.label.substr(a.chart_prefix.size());
  std::map<std::string, std::vector<const results::RunItemMetrics*>> per_config;
  std::map<std::pair<std::string, std::string>, std::vector<const results::RunItemMetrics*>> per_domain;
  for (const results::RunItemMetrics& r : in.run.items) {
    const auto it = spec_of.find(r.metrics.config_id);
    if (it == spec_of.end()) continue;
    per_config[it->second].push_back(&r);
    per_domain[{r.domain, it->second}].push_back(&r);
    a.domains.insert(r.domain);
  }
  for (ConfigStats& s : a.configs) {
    scoring::ItemAggregator items;
    for (const auto* r : per_config[s.spec]) items.add(item_scores(r->metrics));
    s.quality = items.result();
    if (s.role == results::ConfigRole::reference) a.gold = scoring::gold_signal(s.quality), a.reference_spec = s.spec;
    std::vector<scoring::TurnLatency> turns;
    for (const results::RunTurnMetrics& t : in.run.turns)
      if (spec_of.count(t.turn.config_id) && spec_of[t.turn.config_id] == s.spec) turns.push_back(turn_latency(t.turn));
    s.latency = scoring::aggregate_latency(turns);
  }

  // Baseline rows are paired by item key and config spec, never by database ids.
  std::map<std::pair<std::string, std::string>, const results::RunItemMetrics*> base;
  if (in.baseline)
    for (const results::RunItemMetrics& r : in.baseline->items)
      if (const results::RunConfigRecord* c = in.baseline->config(r.metrics.config_id)) base[{r.item_key, c->spec}] = &r;

  for (const auto& [key, rows] : per_domain) {
    DomainStats d;
    scoring::ItemAggregator sum, base_sum;
    for (const auto* r : rows) {
      sum.add(item_scores(r->metrics));
      const auto b = base.find({r->item_key, key.second});
      if (b != base.end()) {
        base_sum.add(item_scores(b->second->metrics));
        ++d.paired;
        if (std::isfinite(r->metrics.kld_mean) && std::isfinite(b->second->metrics.kld_mean))
          a.moved.push_back({r->item_key, r->domain, key.second, b->second->metrics.kld_mean, r->metrics.kld_mean});
      }
    }
    d.quality = sum.result();
    d.baseline_kld_mean = base_sum.result().kld_mean;
    a.by_domain[key] = d;
  }
  std::sort(a.moved.begin(), a.moved.end(), [](const MovedItem& x, const MovedItem& y) {
    const double dx = std::fabs(x.candidate - x.baseline), dy = std::fabs(y.candidate - y.baseline);
    if (dx != dy) return dx > dy;
    return std::tie(x.item_key, x.spec) < std::tie(y.item_key, y.spec);
  });
  while (!a.moved.empty() && a.moved.back().candidate == a.moved.back().baseline) a.moved.pop_back();
  if (a.moved.size() > 12) a.moved.resize(12);

  // Drift is over sessions only: items with more than one turn, where context grows per turn.
  std::map<std::string, int64_t> turns_of_item;
  for (const results::RunTurnMetrics& t : in.run.turns)
    turns_of_item[t.item_key] = std::max(turns_of_item[t.item_key], t.turn.turn_index + 1);
  std::set<std::string> sessions;
  std::map<std::string, std::vector<scoring::SessionTurn>> session_turns;  // spec -> its turns of sessions
  for (const results::RunTurnMetrics& t : in.run.turns) {
    if (turns_of_item[t.item_key] < 2 || !spec_of.count(t.turn.config_id) || !std::isfinite(t.turn.kld_mean)) continue;
    sessions.insert(t.item_key);
    session_turns[spec_of[t.turn.config_id]].push_back({t.turn.turn_index, t.turn.kld_mean});
  }
  for (const auto& [spec, turns] : session_turns) a.drift[spec] = scoring::drift_over_turns(turns);
  a.sessions = static_cast<int64_t>(sessions.size());
  a.positions = run_positions(in.run, positions_bootstrap());
  a.depth_accuracy = run_depth_accuracy(in.run);
  return a;
}

// ---- SVG ---------------------------------------------------------------------------------

// Round numbers for an axis from 0 (or lo) to at least hi.
std::vector<double> ticks(double lo, double hi) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / 4;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> out;
  for (double v = std::floor(lo / step) * step; v <= hi + step * 0.999; v += step) out.push_back(v);
  return out;
}

struct Frame {
  double w = 680, h = 300, left = 70, right = 20, top = 30, bottom = 50;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  double px(double x) const { return left + (x - x0) / (x1 - x0) * (w - left - right); }
  double py(double y) const { return h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom); }
};

std::string svg_open(const std::string& id, const Frame& f, const std::string& title) {
  return fmt::format(
      "<svg id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 {:.0f} {:.0f}\" "
      "role=\"img\"><title>{}</title><rect x=\"0\" y=\"0\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"#fff\"/>"
      "<text x=\"{:.0f}\" y=\"18\" class=\"t\">{}</text>",
      id, f.w, f.h, f.w, f.h, xml_escape(title), f.w, f.h, f.left, xml_escape(title));
}

std::string axes(const Frame& f, const std::vector<double>& xt, const std::vector<double>& yt, const std::string& xlabel,
                 const std::string& ylabel) {
  std::string s;
  for (double y : yt)
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"g\"/><text x=\"{:.1f}\" y=\"{:.1f}\" "
                     "class=\"yl\">{}</text>",
                     f.left, f.py(y), f.w - f.right, f.py(y), f.left - 6, f.py(y) + 4, num(y, 6));
  for (double x : xt)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"xl\">{}</text>", f.px(x), f.h - f.bottom + 16, num(x, 6));
  s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"a\"/>", f.left, f.h - f.bottom,
                   f.w - f.right, f.h - f.bottom);
  s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"a\"/>", f.left, f.top, f.left,
                   f.h - f.bottom);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"xl\">{}</text>", (f.left + f.w - f.right) / 2, f.h - 12, xml_escape(xlabel));
  s += fmt::format("<text x=\"14\" y=\"{:.1f}\" class=\"xl\" transform=\"rotate(-90 14 {:.1f})\">{}</text>",
                   (f.top + f.h - f.bottom) / 2, (f.top + f.h - f.bottom) / 2, xml_escape(ylabel));
  return s;
}

std::string empty_note(const Frame& f, const std::string& text) {
  return fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" class=\"xl\">{}</text>", f.w / 2, f.h / 2, xml_escape(text));
}

// A point's label: the point (px, py), the label's width and its baseline-left corner (lx, ly).
struct LabelBox {
  double px = 0, py = 0, w = 0, lx = 0, ly = 0;
  bool set = false;
};

// `text` cut to `width` px with an ellipsis (the whole of it stays in the element's tooltip).
std::string fit_label(const std::string& text, double width) {
  const size_t chars = static_cast<size_t>(std::max(4.0, width / 6.5));
  if (text.size() <= chars) return text;
  size_t cut = chars - 1;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return text.substr(0, cut) + "\u2026";
}

// 11 px sans-serif: about 6.5 px a character, enough to keep boxes apart.
double label_width(const std::string& text) { return 6.5 * static_cast<double>(text.size()); }

bool overlaps(const LabelBox& a, const LabelBox& b) {
  constexpr double h = 13;
  return a.lx < b.lx + b.w && b.lx < a.lx + a.w && a.ly - h < b.ly && b.ly - h < a.ly;
}

// The first candidate place beside the point that no placed label (or point) takes, inside the
// plot; false when every place is taken (ten configs in one corner) or none is inside: the
// caller then names the point in a legend instead, since a label that covers another is read
// as neither.
bool place_label(LabelBox& box, const std::vector<LabelBox>& all, const Frame& f) {
  const std::pair<double, double> offsets[] = {{9, -6},  {9, 12},  {9, -20}, {9, 26},  {-9, -6}, {-9, 12},
                                               {9, -34}, {9, 40},  {-9, -20}, {-9, 26}, {9, -48}, {9, 54},
                                               {-9, -34}, {-9, 40}, {9, -62}, {9, 68}, {-9, -48}, {-9, 54}};
  auto inside = [&] {
    return box.lx >= f.left && box.lx + box.w <= f.w - 2 && box.ly - 11 >= f.top - 8 && box.ly <= f.h - f.bottom - 2;
  };
  for (const auto& [dx, dy] : offsets) {
    box.lx = dx > 0 ? box.px + dx : box.px + dx - box.w;
    box.ly = box.py + dy;
    if (!inside()) continue;
    bool free = true;
    for (const LabelBox& other : all) {
      if (&other == &box) continue;
      // Other labels already placed, and every point's dot (a 12 x 12 box around it).
      if (other.set && overlaps(box, other)) free = false;
      const LabelBox dot{0, 0, 12, other.px - 6, other.py + 6.5, true};
      if (overlaps(box, dot)) free = false;
    }
    if (free) {
      box.set = true;
      return true;
    }
  }
  return false;
}

std::string chart_quality_bits(const Analysis& a) {
  Frame f;
  // Each config's label sits beside its point: past six configs the plot grows taller, so more of
  // the near-lossless configs crowded at the bottom find free places; the rest are named in a
  // legend under the chart, by their colour.
  f.h += 18 * static_cast<double>(std::max<ptrdiff_t>(0, static_cast<ptrdiff_t>(a.configs.size()) - 6));
  std::string s;
  double xmax = 0, ymax = 0;
  for (const ConfigStats& c : a.configs)
    if (std::isfinite(c.bits) && std::isfinite(c.quality.kld_mean))
      xmax = std::max(xmax, c.bits), ymax = std::max(ymax, c.quality.kld_mean);
  const std::vector<double> xt = ticks(0, xmax), yt = ticks(0, ymax);
  f.x0 = 0, f.x1 = xt.back(), f.y0 = 0, f.y1 = yt.back();
  s += axes(f, xt, yt, "effective bits per element (K and V)", "mean KLD vs reference");
  // Configs of one bit width with near-equal KLD (fp8 and q8_0) sit on one spot: each label takes
  // the first free place beside its point, with a leader line when it had to move away.
  std::vector<LabelBox> placed;
  for (const ConfigStats& c : a.configs) {
    if (!std::isfinite(c.bits) || !std::isfinite(c.quality.kld_mean)) continue;
    const double x = f.px(c.bits), y = f.py(c.quality.kld_mean);
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"6\" fill=\"{}\"><title>{}: {} bits, mean KLD {}</title></circle>",
                     x, y, c.color, xml_escape(c.label), num(c.bits), num(c.quality.kld_mean));
    placed.push_back({x, y, label_width(c.chart), 0, 0});
  }
  size_t k = 0;
  std::vector<const ConfigStats*> unplaced;
  for (const ConfigStats& c : a.configs) {
    if (!std::isfinite(c.bits) || !std::isfinite(c.quality.kld_mean)) continue;
    LabelBox& box = placed[k++];
    if (!place_label(box, placed, f)) {
      unplaced.push_back(&c);
      continue;
    }
    if (std::fabs(box.ly - (box.py - 6)) > 1 || std::fabs(box.lx - (box.px + 9)) > 1)
      s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"1\"/>",
                       box.px, box.py, box.lx < box.px ? box.lx + box.w : box.lx, box.ly - 4, c.color);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"pl\">{}</text>", box.lx, box.ly, xml_escape(c.chart));
  }
  Frame outer = f;
  outer.h += 14 * static_cast<double>(unplaced.size()) + (unplaced.empty() ? 0 : 4);
  double ly = f.h;
  for (const ConfigStats* c : unplaced) {
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\" fill=\"{}\"/><text x=\"{:.1f}\" y=\"{:.1f}\" class=\"pl\">{}: "
                     "{} bits, mean KLD {}</text>",
                     f.left + 5, ly - 4, c->color, f.left + 16, ly, xml_escape(fit_label(c->chart, f.w - f.left - 200)),
                     num(c->bits), num(c->quality.kld_mean));
    ly += 14;
  }
  return svg_open("chart-quality-bits", outer, "Mean KLD vs effective bits per element (each point a KV config)") + s + "</svg>";
}

struct BarSeries {
  std::string name, color;
  std::vector<double> values;  // one per row
};


// Horizontal grouped bars: one group per row label, one bar per series. The row labels' margin
// fits the longest label (up to 300 px; a longer one is cut, whole in its tooltip) and the chart
// widens by as much, so the bars keep their 460 px; the legend wraps onto as many lines as it
// needs, so no series goes unnamed.
std::string grouped_bars(const std::string& id, const std::string& title, const std::vector<std::string>& rows,
                         const std::vector<BarSeries>& series, const std::string& xlabel) {
  Frame f;
  size_t longest = 0;
  for (const std::string& r : rows) longest = std::max(longest, r.size());
  f.left = std::clamp(label_width(std::string(longest, 'x')) + 16, 120.0, 300.0);
  f.right = 60;  // room for the value printed past the longest bar
  f.w = f.left + 460 + f.right;
  // The legend's entries, line by line, from the plot's left edge to its right.
  std::vector<std::pair<double, double>> legend;  // (x, y of the swatch's top) per series
  double lx = f.left, ly = 28;
  std::vector<std::string> names;  // each cut to the plot's width, whole in its tooltip
  for (const BarSeries& b : series) {
    names.push_back(fit_label(b.name, f.w - f.right - f.left - 24));
    const double entry = 24 + 7 * static_cast<double>(names.back().size());
    if (lx > f.left && lx + entry > f.w - f.right) lx = f.left, ly += 14;
    legend.emplace_back(lx, ly);
    lx += entry;
  }
  f.top += ly - 28;
  const double bar = 12, gap = 10;
  const double group = bar * static_cast<double>(series.size()) + gap;
  f.h = f.top + f.bottom + 20 + group * static_cast<double>(std::max<size_t>(rows.size(), 1));
  std::string s = svg_open(id, f, title);
  double xmax = 0;
  for (const BarSeries& b : series)
    for (double v : b.values)
      if (std::isfinite(v)) xmax = std::max(xmax, v);
  const std::vector<double> xt = ticks(0, xmax);
  f.x0 = 0, f.x1 = xt.back();
  for (double x : xt)
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"g\"/><text x=\"{:.1f}\" y=\"{:.1f}\" "
                     "class=\"xl\">{}</text>",
                     f.px(x), f.top + 20, f.px(x), f.h - f.bottom, f.px(x), f.h - f.bottom + 16, num(x, 6));
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"xl\">{}</text>", (f.left + f.w - f.right) / 2, f.h - 12, xml_escape(xlabel));
  for (size_t k = 0; k < series.size(); ++k)
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1f}\" y=\"{:.1f}\" "
                     "class=\"pl\">{}<title>{}</title></text>",
                     legend[k].first, legend[k].second, series[k].color, legend[k].first + 14, legend[k].second + 9,
                     xml_escape(names[k]), xml_escape(series[k].name));
  if (rows.empty()) return s + empty_note(f, "no data") + "</svg>";
  for (size_t r = 0; r < rows.size(); ++r) {
    const double gy = f.top + 24 + group * static_cast<double>(r);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"yl\">{}<title>{}</title></text>", f.left - 6, gy + group / 2,
                     xml_escape(fit_label(rows[r], f.left - 10)), xml_escape(rows[r]));
    for (size_t k = 0; k < series.size(); ++k) {
      const double v = series[k].values[r];
      const double y = gy + bar * static_cast<double>(k);
      if (!std::isfinite(v)) {
        s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"pl\">n/a</text>", f.left + 4, y + 10);
        continue;
      }
      s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{} {}: {}</title></rect>"
                       "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"pl\">{}</text>",
                       f.left, y, std::max(0.5, f.px(v) - f.left), bar - 2, series[k].color, xml_escape(rows[r]),
                       xml_escape(series[k].name), num(v, 6), f.px(v) + 4, y + 9, num(v, 5));
    }
  }
  return s + "</svg>";
}

std::string chart_drift(const Analysis& a) {
  Frame f;
  // The legend stacks down a right margin as wide as the longest name, as the position chart's.
  size_t longest = 0;
  for (const auto& [spec, turns] : a.drift) longest = std::max(longest, a.chart_label(spec).size());
  if (!a.drift.empty()) {
    f.right = std::min(320.0, std::max(170.0, 34 + label_width(std::string(longest, 'x'))));
    f.w += f.right - 20;
  }
  std::string s = svg_open("chart-drift", f, "Drift over turns: mean KLD per assistant turn of replayed sessions");
  int64_t tmax = 0;
  double ymax = 0;
  for (const auto& [spec, turns] : a.drift)
    for (const auto& [t, kld] : turns) tmax = std::max(tmax, t), ymax = std::max(ymax, kld);
  const std::vector<double> xt = ticks(0, static_cast<double>(std::max<int64_t>(tmax, 1))), yt = ticks(0, ymax);
  f.x0 = 0, f.x1 = xt.back(), f.y0 = 0, f.y1 = yt.back();
  s += axes(f, xt, yt, "turn index", "mean KLD");
  if (a.drift.empty()) return s + empty_note(f, "no multi-turn sessions in this run") + "</svg>";
  double ly = f.top + 4;
  for (const auto& [spec, turns] : a.drift) {
    const auto ci = a.config_index.find(spec);
    const std::string color = ci == a.config_index.end() ? "#777" : a.configs[ci->second].color;
    std::string pts;
    for (const auto& [t, kld] : turns) pts += fmt::format("{:.1f},{:.1f} ", f.px(static_cast<double>(t)), f.py(kld));
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>", pts, color);
    for (const auto& [t, kld] : turns)
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{} turn {}: {}</title></circle>",
                       f.px(static_cast<double>(t)), f.py(kld), color, xml_escape(a.label(spec)), t, num(kld));
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1f}\" y=\"{:.1f}\" "
                     "class=\"pl\">{}</text>",
                     f.w - f.right + 10, ly, color, f.w - f.right + 24, ly + 9,
                     xml_escape(fit_label(a.chart_label(spec), f.right - 28)));
    ly += 14;
  }
  return s + "</svg>";
}

// Degradation against position: x the position buckets any config reaches (evenly spaced, in
// order), y the mean KLD of the tokens there, one line per candidate config. The legend stacks
// down the right edge, one row per config, so no two labels share a place.
std::string chart_positions(const Analysis& a) {
  Frame f;
  size_t longest = 0;
  std::set<int> present;
  double ymax = 0;
  const std::vector<scoring::PositionCurve>& curves = a.positions.curves;
  // The interval of a config's bucket over documents (NaN bounds: none).
  auto interval_of = [&](size_t k, int bucket) {
    for (const scoring::DepthPoint& d : a.positions.depth[k].points)
      if (d.bucket == bucket) return d.estimate.kld_mean;
    return scoring::Estimate{};
  };
  for (size_t k = 0; k < curves.size(); ++k) {
    longest = std::max(longest, a.chart_label(curves[k].config).size());
    for (const scoring::PositionPoint& p : curves[k].points) {
      present.insert(p.bucket);
      if (std::isfinite(p.kld_mean)) ymax = std::max(ymax, p.kld_mean);
      if (const double hi = interval_of(k, p.bucket).high; std::isfinite(hi)) ymax = std::max(ymax, hi);
    }
  }
  f.right = std::min(320.0, std::max(170.0, 34 + label_width(std::string(longest, 'x'))));
  // Room for every bucket's label ("64-128k" is ~46 px) however long the legend's names.
  f.w = std::max(f.w, f.left + f.right + 56.0 * static_cast<double>(present.size()));
  std::string s = svg_open("chart-positions", f,
                           "Mean KLD by position, with intervals over documents");
  const std::vector<int> buckets(present.begin(), present.end());
  const std::vector<double> yt = ticks(0, ymax);
  f.x0 = -0.5, f.x1 = static_cast<double>(std::max<size_t>(buckets.size(), 1)) - 0.5, f.y0 = 0, f.y1 = yt.back();
  s += axes(f, {}, yt, "positions (tokens before the scored token)", "mean KLD");
  if (buckets.empty()) return s + empty_note(f, "no scored tokens by position in this run") + "</svg>";
  auto x_of = [&](int bucket) {
    return static_cast<double>(std::lower_bound(buckets.begin(), buckets.end(), bucket) - buckets.begin());
  };
  for (const int b : buckets)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"xl\">{}</text>", f.px(x_of(b)), f.h - f.bottom + 16,
                     scoring::position_bucket_name(b));
  double ly = f.top + 4;
  for (size_t k = 0; k < curves.size(); ++k) {
    const scoring::PositionCurve& c = curves[k];
    const auto ci = a.config_index.find(c.config);
    const std::string color = ci == a.config_index.end() ? "#777" : a.configs[ci->second].color;
    // Each config's points sit a little apart, so that overlapping intervals stay readable.
    const double shift = (static_cast<double>(k) - static_cast<double>(curves.size() - 1) / 2) * 0.06;
    std::string pts;
    for (const scoring::PositionPoint& p : c.points)
      if (std::isfinite(p.kld_mean)) pts += fmt::format("{:.1f},{:.1f} ", f.px(x_of(p.bucket) + shift), f.py(p.kld_mean));
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>", pts, color);
    for (const scoring::PositionPoint& p : c.points) {
      if (!std::isfinite(p.kld_mean)) continue;
      const scoring::Estimate e = interval_of(k, p.bucket);
      const double x = f.px(x_of(p.bucket) + shift);
      if (std::isfinite(e.low))
        s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"1\"/>", x,
                         f.py(e.low), x, f.py(e.high), color);
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{} at {}: mean KLD {} ({}), same "
                       "top-1 {}%, {} tokens in {} items</title></circle>",
                       x, f.py(p.kld_mean), color, xml_escape(c.shown()), scoring::position_bucket_name(p.bucket),
                       num(p.kld_mean),
                       std::isfinite(e.low) ? fmt::format("interval over documents {} to {}", num(e.low), num(e.high))
                                            : std::string("too few documents for an interval"),
                       num(100 * p.same_top1), p.tokens, p.items);
    }
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1f}\" y=\"{:.1f}\" "
                     "class=\"pl\">{}</text>",
                     f.w - f.right + 10, ly, color, f.w - f.right + 24, ly + 9,
                     xml_escape(fit_label(a.chart_label(c.config), f.right - 28)));
    ly += 14;
  }
  return s + "</svg>";
}

std::string th(const std::vector<std::string>& cols) {
  std::string s = "<tr>";
  for (const std::string& c : cols) s += "<th>" + xml_escape(c) + "</th>";
  return s + "</tr>";
}

// A cell that is one long word (a config as typed, a canonical spec) may wrap after each '/' (K
// from V) and '+' (weights from KV): ten configs' tables then fit a laptop's width.
std::string cell(const std::string& text) {
  std::string out = xml_escape(text);
  if (text.size() <= 16 || text.find_first_of(" \t\n") != std::string::npos) return out;
  std::string broken;
  for (const char ch : out) {
    broken += ch;
    if (ch == '/' || ch == '+') broken += "<wbr/>";
  }
  return broken;
}

std::string td(const std::vector<std::string>& cols) {
  std::string s = "<tr>";
  for (const std::string& c : cols) s += "<td>" + cell(c) + "</td>";
  return s + "</tr>";
}

std::string percent(double v) { return std::isfinite(v) ? fmt::format("{:.1f}%", 100 * v) : "-"; }

// A config's gold accuracy, or why it says nothing: "n/a (reference 0/10)" where the reference
// cannot answer (scoring::GoldSignal), "-" where no item has a gold answer.
std::string gold_cell(const scoring::GoldSignal& gold, int64_t answered, double accuracy) {
  if (answered == 0) return "-";
  return gold.informative() ? percent(accuracy) : gold.unavailable();
}

// One metric's cell in a summary table (scoring/metrics.h): fractions as %, gold accuracy only
// where the reference can answer.
std::string metric_cell(const scoring::MetricInfo& m, const scoring::ItemAggregate& quality,
                        const scoring::LatencyAggregate& latency, const scoring::GoldSignal& gold) {
  if (m.needs == scoring::MetricNeeds::gold_answers) return gold_cell(gold, quality.gold_items, quality.gold_accuracy);
  const double v = m.of_summary(quality, latency);
  return m.unit == scoring::MetricUnit::fraction ? percent(v) : num(v);
}

// Per domain the rule reads the reference's answers in that domain.
scoring::GoldSignal domain_gold(const Analysis& a, const std::string& domain) {
  const auto it = a.by_domain.find({domain, a.reference_spec});
  return it == a.by_domain.end() ? scoring::GoldSignal{} : scoring::gold_signal(it->second.quality);
}

std::string bytes(double v) {
  if (!std::isfinite(v)) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return fmt::format("{:.4g} {}", v, units[u]);
}

std::vector<const ConfigStats*> candidates(const Analysis& a) {
  std::vector<const ConfigStats*> out;
  for (const ConfigStats& c : a.configs)
    if (c.role != results::ConfigRole::reference) out.push_back(&c);
  return out;
}


std::string verdicts_html(const RunVerdicts& v) {
  if (v.configs.empty()) return "";
  std::string h = "<h2>Verdict per config</h2>\n<p class=\"note\">Can each config replace " + xml_escape(v.reference) +
                  " on this workload? Confidence bounds on the paired per-item harms against the margins of " +
                  xml_escape(v.policy.source) +
                  ": safe when every bound is inside its margin, unsafe when a harm is beyond one with confidence, "
                  "inconclusive otherwise.</p>\n<ul>\n";
  for (const scoring::ConfigVerdict& c : v.configs)
    h += fmt::format("<li class=\"v-{}\"><b>{}</b>: {}: {}</li>\n", scoring::verdict_name(c.verdict), xml_escape(c.shown()),
                     scoring::verdict_name(c.verdict), xml_escape(c.reason));
  h += "</ul>\n";
  for (const std::string& line : v.conclusion) h += "<p>" + xml_escape(line) + "</p>\n";
  return h;
}

// Per candidate config: its turns whose answer differs from the reference's.
struct ChangedAnswers {
  std::string spec, label;
  size_t turns = 0;  // turns with this config's answer stored
  std::vector<std::pair<const TurnAnswers*, const ConfigAnswer*>> changed;
};

std::vector<ChangedAnswers> changed_answers(const ReportInput& in) {
  std::vector<ChangedAnswers> out;
  for (const results::RunConfigRecord& c : in.run.configs) {
    if (c.role == results::ConfigRole::reference) continue;
    ChangedAnswers x;
    x.spec = c.spec;
    x.label = c.label.empty() ? c.spec : c.label;
    for (const TurnAnswers& t : in.answers.turns)
      for (const ConfigAnswer& a : t.answers)
        if (a.spec == c.spec && a.text) {
          ++x.turns;
          if (a.divergence) x.changed.emplace_back(&t, &a);
        }
    out.push_back(std::move(x));
  }
  return out;
}

constexpr size_t kChangedShownHtml = 30, kChangedShownMarkdown = 8;

std::string changed_answers_html(const ReportInput& in) {
  std::string h = "<h2 id=\"answers-changed\">Answers that changed</h2>\n";
  if (!in.answers.stored)
    return h + "<p class=\"note\">This run holds no answer text (it was made before kvgate kept answers).</p>\n";
  h += fmt::format("<p class=\"note\">Per config, the turns whose greedy answer differs from the reference's ({}), "
                   "highlighted from the first token that differs, with the gold answer on an item's last turn. "
                   "<code>kvgate runs show {} --answers --changed</code> lists every one.</p>\n",
                   xml_escape(in.answers.label(in.answers.reference)), in.run.record.id);
  for (const ChangedAnswers& c : changed_answers(in)) {
    h += fmt::format("<h3 id=\"{}\">{}: {} of {} answers changed</h3>\n", changed_answers_anchor(c.spec), xml_escape(c.label),
                     c.changed.size(), c.turns);
    if (c.changed.empty()) continue;
    h += "<table class=\"answers\">" + th({"item", "domain", "turn", "first different token", "reference answer",
                                             "this config's answer", "gold"});
    for (size_t i = 0; i < c.changed.size() && i < kChangedShownHtml; ++i) {
      const auto& [t, a] = c.changed[i];
      const ConfigAnswer& ref = t->answers.front();
      const auto [same, rest] = split_at_divergence(*a);
      const std::string gold = t->gold ? *t->gold + (a->gold_match ? (*a->gold_match ? " (matched)" : " (missed)") : "") : "-";
      h += "<tr><td>" + xml_escape(t->item_key) + "</td><td>" + xml_escape(t->domain) + "</td><td>" +
           std::to_string(t->turn_index) + "</td><td>" + std::to_string(a->divergence.value_or(0)) + "</td><td>" +
           xml_escape(valid_utf8(ref.text.value_or(""))) + "</td><td>" + xml_escape(valid_utf8(same)) + "<mark>" +
           xml_escape(valid_utf8(rest)) + "</mark></td><td>" + xml_escape(valid_utf8(gold)) + "</td></tr>";
    }
    h += "</table>\n";
    if (c.changed.size() > kChangedShownHtml)
      h += fmt::format("<p class=\"note\">{} more: <code>kvgate runs show {} --answers --changed --config {}</code></p>\n",
                       c.changed.size() - kChangedShownHtml, in.run.record.id, xml_escape(c.label));
  }
  return h;
}

std::string md_text(const std::string& s) {
  std::string out;
  for (char ch : one_line(s)) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

std::string changed_answers_markdown(const ReportInput& in) {
  if (!in.answers.stored) return "";
  std::string md = fmt::format("\n**Answers that changed** (against the reference {}; ⟦…⟧ from the first token that "
                               "differs; all: `kvgate runs show {} --answers --changed`)\n",
                               in.answers.label(in.answers.reference), in.run.record.id);
  for (const ChangedAnswers& c : changed_answers(in)) {
    md += fmt::format("\n*{}*: {} of {} answers changed\n", c.label, c.changed.size(), c.turns);
    if (c.changed.empty()) continue;
    md += "\n| item | turn | token | reference | this config | gold |\n|---|---:|---:|---|---|---|\n";
    for (size_t i = 0; i < c.changed.size() && i < kChangedShownMarkdown; ++i) {
      const auto& [t, a] = c.changed[i];
      const auto [same, rest] = split_at_divergence(*a);
      md += fmt::format("| {} | {} | {} | {} | {}⟦{}⟧ | {} |\n", md_text(t->item_key), t->turn_index, a->divergence.value_or(0),
                        md_text(t->answers.front().text.value_or("")), md_text(same), md_text(rest),
                        t->gold ? md_text(*t->gold) : "-");
    }
    if (c.changed.size() > kChangedShownMarkdown)
      md += fmt::format("\n{} more: `kvgate runs show {} --answers --changed --config {}`\n",
                        c.changed.size() - kChangedShownMarkdown, in.run.record.id, c.label);
  }
  return md;
}

}  // namespace

std::string changed_answers_anchor(const std::string& spec) {
  std::string out = "changed-";
  for (char ch : spec) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-';
  return out;
}

const std::vector<std::string>& report_chart_ids() {
  static const std::vector<std::string> ids = {"chart-quality-bits", "chart-domains", "chart-drift", "chart-positions",
                                               "chart-kld-tails",    "chart-latency", "chart-memory"};
  return ids;
}

// Engine mode's cross-check: an in-process config beside the endpoint running the same KV
// config, metric by metric (both sides top-k estimates against the same reference).
std::vector<std::tuple<std::string, std::string, std::string, std::string>> cross_check_rows(const Analysis& a,
                                                                                         const std::string& emu,
                                                                                         const std::string& eng) {
  const auto ie = a.config_index.find(emu), ig = a.config_index.find(eng);
  if (ie == a.config_index.end() || ig == a.config_index.end()) return {};
  const ConfigStats& e = a.configs[ie->second];
  const ConfigStats& g = a.configs[ig->second];
  auto diff = [](double x, double y) { return std::isfinite(x) && std::isfinite(y) ? fmt::format("{:+.4g}", y - x) : "-"; };
  std::vector<std::tuple<std::string, std::string, std::string, std::string>> rows;
  for (const scoring::MetricComparison& m : scoring::cross_check_metrics(e.quality, e.latency, g.quality, g.latency)) {
    rows.emplace_back(scoring::metric_heading(*m.metric, false), num(m.emulation), num(m.engine), diff(m.emulation, m.engine));
  }
  return rows;
}

std::string cross_check_html(const Analysis& a, const EngineRunView& v) {
  std::string h;
  for (const auto& [emu, eng] : v.cross_pairs) {
    h += "<h2>Cross-check: " + xml_escape(emu) + " emulated vs on the engine</h2>\n<table>" +
         th({"metric", "emulation (" + emu + ")", "engine (" + eng + ")", "engine − emulation"});
    for (const auto& [name, x, y, d] : cross_check_rows(a, emu, eng)) h += td({name, x, y, d});
    h += "</table>\n";
  }
  return h;
}

std::string cross_check_markdown(const Analysis& a, const EngineRunView& v) {
  std::string md;
  for (const auto& [emu, eng] : v.cross_pairs) {
    md += fmt::format("\n**Cross-check: {} emulated vs `{}`**\n\n| metric | emulation | engine | engine − emulation |\n"
                      "|---|---:|---:|---:|\n",
                      emu, eng);
    for (const auto& [name, x, y, d] : cross_check_rows(a, emu, eng)) md += fmt::format("| {} | {} | {} | {} |\n", name, x, y, d);
  }
  return md;
}

std::string render_report_html(const ReportInput& in) {
  const Analysis a = analyze(in);
  const auto& i = in.run.record.info;
  std::string h =
      "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>kvgate report: run " +
      std::to_string(in.run.record.id) + "</title>\n<style>\n"
      "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}"
      "table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}"
      "th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}"
      "svg{display:block;margin:8px 0;border:1px solid #ddd}svg .t{font-size:13px;font-weight:600}"
      "svg .xl{font-size:11px;text-anchor:middle;fill:#333}svg .yl{font-size:11px;text-anchor:end;fill:#333}"
      "svg .pl{font-size:11px;fill:#222}svg .g{stroke:#eee}svg .a{stroke:#555}.note{color:#666;font-size:13px}"
      "table.answers td,table.answers th{text-align:left}table.answers td{white-space:pre-wrap;max-width:320px}"
      "mark{background:#fdd}"
      ".v-unsafe b{color:#b00}.v-inconclusive b{color:#a60}.v-safe b{color:#070}\n"
      "</style>\n</head>\n<body>\n";
  h += fmt::format("<h1>kvgate report: run {}</h1>\n<p>{} &#183; status {} &#183; {} items &#183; model {} (sha256 {}) &#183; "
                   "started {} &#183; git {} &#183; {} threads on {}</p>\n",
                   in.run.record.id, xml_escape(i.suite_name), xml_escape(results::run_status_name(in.run.record.status)), in.run.record.items, xml_escape(i.model_path),
                   xml_escape(i.model_sha256.substr(0, 12)), xml_escape(in.run.record.started_at), xml_escape(i.git_sha), i.threads, xml_escape(i.cpu));
  if (in.baseline)
    h += fmt::format("<p>Baseline: run {} ({}, {} items, status {}). Deltas pair items by key and KV config.</p>\n",
                     in.baseline->record.id, xml_escape(in.baseline->record.info.suite_name), in.baseline->record.items, xml_escape(results::run_status_name(in.baseline->record.status)));

  h += verdicts_html(in.verdicts);
  // Every quality metric of the metric table; latency has its own chart and table below.
  {
    std::vector<std::string> head = {"kv config", "role", "bits", "items", "scored tokens"};
    for (const scoring::MetricInfo& m : scoring::kMetrics)
      if (m.unit != scoring::MetricUnit::ms) head.emplace_back(m.label);
    head.emplace_back("canonical spec");
    h += "<h2>Summary per KV config</h2>\n<table>" + th(head);
    for (const ConfigStats& c : a.configs) {
      std::vector<std::string> row = {c.label, results::config_role_name(c.role), num(c.bits), std::to_string(c.quality.items),
                                      std::to_string(c.quality.scored_tokens)};
      for (const scoring::MetricInfo& m : scoring::kMetrics)
        if (m.unit != scoring::MetricUnit::ms) row.push_back(metric_cell(m, c.quality, c.latency, a.gold));
      row.push_back(c.spec);
      h += td(row);
    }
    h += "</table>\n";
  }
  if (!a.gold.note().empty()) h += "<p class=\"note\">Note: " + xml_escape(a.gold.note()) + ".</p>\n";

  if (!in.weights_kv.empty()) {
    const WeightsKvTable t = weights_kv_table(in.weights_kv);
    h += "<h2>Weights x KV</h2>\n<p class=\"note\">Quality against the reference beside memory on " +
         xml_escape(in.budget.describe()) + ": is the loss, and the memory wall, from the weights or from the KV cache?</p>\n<table>" +
         th(t.header);
    for (const auto& row : t.rows) h += td(row);
    h += "</table>\n";
    for (const std::string& line : t.attribution) h += "<p class=\"note\">" + xml_escape(line) + "</p>\n";
  }

  h += "<h2>Quality vs effective bits</h2>\n";
  if (!a.chart_prefix.empty())
    h += "<p class=\"note\">The charts name each config without the start its name shares with every other: <code>" +
         xml_escape(a.chart_prefix) + "</code>.</p>\n";
  h += chart_quality_bits(a) + "\n";

  h += "<h2>Per-domain breakdown</h2>\n";
  {
    std::vector<std::string> rows;
    std::vector<BarSeries> series;
    const std::vector<const ConfigStats*> cands = candidates(a);
    for (const ConfigStats* c : cands) series.push_back({c->chart, c->color, {}});
    for (const std::string& d : a.domains) {
      rows.push_back(d);
      for (size_t k = 0; k < cands.size(); ++k) {
        const auto it = a.by_domain.find({d, cands[k]->spec});
        series[k].values.push_back(it == a.by_domain.end() ? kNaN : it->second.quality.kld_mean);
      }
    }
    h += grouped_bars("chart-domains", "Mean KLD per eval domain and KV config", rows, series, "mean KLD") + "\n";
    std::vector<std::string> cols = {"domain", "kv config", "items", "mean KLD", "same top-1", "gold accuracy"};
    if (in.baseline) cols.insert(cols.end(), {"baseline mean KLD", "Δ mean KLD", "paired items"});
    h += "<table>" + th(cols);
    for (const auto& [key, d] : a.by_domain) {
      std::vector<std::string> row = {key.first, a.label(key.second), std::to_string(d.quality.items),
                                      num(d.quality.kld_mean), percent(d.quality.same_top1),
                                      gold_cell(domain_gold(a, key.first), d.quality.gold_items, d.quality.gold_accuracy)};
      if (in.baseline)
        row.insert(row.end(), {num(d.baseline_kld_mean),
                               std::isfinite(d.baseline_kld_mean) ? fmt::format("{:+.4g}", d.quality.kld_mean - d.baseline_kld_mean) : "-",
                               std::to_string(d.paired)});
      h += td(row);
    }
    h += "</table>\n";
  }

  h += fmt::format("<h2>Drift over turns</h2>\n<p class=\"note\">{} multi-turn sessions; each point is the mean over "
                   "sessions of that turn's mean KLD (context grows with the turn index).</p>\n",
                   a.sessions);
  h += chart_drift(a) + "\n";

  h += "<h2>Quality by position</h2>\n<p class=\"note\">Each scored token counts in the range of its absolute position "
       "in the item's context; KV quantization that fails at long context shows as a line that climbs to the right. "
       "Intervals come from a bootstrap over the items (documents) in each range, never over tokens; where every item "
       "is a depth sweep (docs/evalsets.md), every range holds the same documents and the line compares like with "
       "like.</p>\n";
  h += chart_positions(a) + "\n";
  if (!a.positions.empty()) {
    const int pct = static_cast<int>(std::lround(a.positions.bootstrap.confidence * 100));
    h += "<table>" + th({"kv config", "positions", "items", "tokens", "mean KLD", fmt::format("{}% interval over items", pct),
                         "mean Δp", "same top-1", "KLD vs the shallowest bucket (same items)"});
    for (size_t k = 0; k < a.positions.curves.size(); ++k) {
      const scoring::PositionCurve& c = a.positions.curves[k];
      for (const scoring::PositionPoint& p : c.points) {
        std::string ci = "-", vs = "-";
        for (const scoring::DepthPoint& d : a.positions.depth[k].points) {
          if (d.bucket != p.bucket) continue;
          if (std::isfinite(d.estimate.kld_mean.low))
            ci = fmt::format("{} to {}", num(d.estimate.kld_mean.low), num(d.estimate.kld_mean.high));
          const scoring::DepthEffect& e = d.vs_shallow;
          if (e.documents > 0 && std::isfinite(e.kld_ratio.value))
            vs = fmt::format("{}x{} on {} items", num(e.kld_ratio.value, 3),
                             std::isfinite(e.kld_ratio.low)
                                 ? fmt::format(" ({} to {})", num(e.kld_ratio.low, 3), num(e.kld_ratio.high, 3))
                                 : std::string(),
                             e.documents);
        }
        h += td({c.shown(), scoring::position_bucket_name(p.bucket), std::to_string(p.items), std::to_string(p.tokens),
                 num(p.kld_mean), ci, num(p.delta_p_mean), percent(p.same_top1), vs});
      }
    }
    h += "</table>\n";
    if (a.positions.has_depth()) {
      h += "<p>Depth effect (the deepest bucket that at least " + std::to_string(scoring::kDepthMinDocuments) +
           " items share with the shallowest, paired on those items):</p>\n<ul>\n";
      for (size_t k = 0; k < a.positions.curves.size(); ++k)
        h += "<li>" +
             xml_escape(depth_effect_line(a.positions.curves[k].shown(), a.positions.depth[k].effect, a.positions.bootstrap)) +
             "</li>\n";
      h += "</ul>\n";
    }
  }
  if (!a.depth_accuracy.empty()) {
    const DepthAccuracy& d = a.depth_accuracy;
    h += "<h3>Gold accuracy by depth of the evidence</h3>\n<p class=\"note\">Items generated at each depth: the same "
         "documents with the evidence moved (correct/answered).</p>\n<table>";
    std::vector<std::string> head = {"domain", "depth"};
    for (const std::string& l : d.labels) head.push_back(l);
    h += th(head);
    for (const DepthAccuracyRow& r : d.rows) {
      std::vector<std::string> row = {r.domain, depth_text(r.depth_permille)};
      for (size_t c = 0; c < d.labels.size(); ++c) row.push_back(depth_accuracy_cell(r, c));
      h += td(row);
    }
    h += "</table>\n";
    for (const auto& [domain, s] : d.signal)
      if (!s.informative()) h += "<p class=\"note\">" + xml_escape(domain + ": " + s.note()) + "</p>\n";
  }

  h += "<h2>KLD distribution tails</h2>\n";
  {
    std::vector<std::string> rows;
    BarSeries p99{"p99 over items of item KLD p99", "#0072B2", {}}, mx{"max token KLD", "#D55E00", {}};
    for (const ConfigStats* c : candidates(a)) {
      rows.push_back(c->chart);
      p99.values.push_back(c->quality.kld_p99);
      mx.values.push_back(c->quality.kld_max);
    }
    h += grouped_bars("chart-kld-tails", "KLD tails per KV config", rows, {p99, mx}, "KLD") + "\n";
  }

  h += "<h2>Latency</h2>\n";
  {
    std::vector<std::string> rows;
    BarSeries t50{"TTFT p50", "#0072B2", {}}, t95{"TTFT p95", "#56B4E9", {}}, o50{"TPOT p50", "#E69F00", {}},
        o95{"TPOT p95", "#D55E00", {}};
    for (const ConfigStats& c : a.configs) {
      rows.push_back(c.chart);
      t50.values.push_back(c.latency.ttft_p50);
      t95.values.push_back(c.latency.ttft_p95);
      o50.values.push_back(c.latency.tpot_p50);
      o95.values.push_back(c.latency.tpot_p95);
    }
    h += grouped_bars("chart-latency", "TTFT and TPOT percentiles per KV config (ms, over all turns)", rows,
                      {t50, t95, o50, o95}, "milliseconds") +
         "\n<table>" + th({"kv config", "TTFT p50", "TTFT p95", "TTFT p99", "TPOT p50", "TPOT p95", "TPOT p99"});
    for (const ConfigStats& c : a.configs)
      h += td({c.label, num(c.latency.ttft_p50), num(c.latency.ttft_p95), num(c.latency.ttft_p99), num(c.latency.tpot_p50),
               num(c.latency.tpot_p95), num(c.latency.tpot_p99)});
    h += "</table>\n";
  }

  h += "<h2>Memory</h2>\n";
  {
    std::vector<std::string> rows;
    BarSeries kv{"KV bytes per token", "#009E73", {}};
    for (const ConfigStats& c : a.configs) {
      rows.push_back(c.chart);
      kv.values.push_back(c.kv_bytes);
    }
    h += grouped_bars("chart-memory", "KV cache bytes per token per KV config (weights: " + bytes(in.weight_bytes) + ")",
                      rows, {kv}, "bytes per token") +
         "\n<table>" + th({"kv config", "KV bytes / token", "KV at 8k tokens", "KV at 32k tokens", "weights (model file)", "32k KV / weights"});
    for (const ConfigStats& c : a.configs)
      h += td({c.label, num(c.kv_bytes, 6), bytes(c.kv_bytes * 8192), bytes(c.kv_bytes * 32768), bytes(in.weight_bytes),
               std::isfinite(in.weight_bytes) && in.weight_bytes > 0 ? num(c.kv_bytes * 32768 / in.weight_bytes, 3) : "-"});
    h += "</table>\n";
  }

  h += engine_html(in.engine) + cross_check_html(a, in.engine);
  h += changed_answers_html(in);

  if (in.baseline) {
    h += "<h2>Items that moved most against the baseline</h2>\n<table>" +
         th({"item", "domain", "kv config", "baseline KLD", "candidate KLD", "Δ"});
    for (const MovedItem& m : a.moved)
      h += td({m.item_key, m.domain, a.label(m.spec), num(m.baseline), num(m.candidate), fmt::format("{:+.4g}", m.candidate - m.baseline)});
    h += "</table>\n";
    if (a.moved.empty()) h += "<p class=\"note\">No item's mean KLD changed.</p>\n";
  }
  h += "</body>\n</html>\n";
  return h;
}

std::string render_report_markdown(const ReportInput& in) {
  const Analysis a = analyze(in);
  std::string md = fmt::format("## kvgate report: run {} ({}, {} items, {})\n\n", in.run.record.id, in.run.record.info.suite_name,
                               in.run.record.items, results::run_status_name(in.run.record.status));
  md += verdicts_markdown(in.verdicts);
  if (in.baseline) md += fmt::format("Baseline: run {} ({}).\n\n", in.baseline->record.id, in.baseline->record.info.suite_name);
  // Every metric of the metric table, in its order.
  md += "| kv config | bits |";
  for (const scoring::MetricInfo& m : scoring::kMetrics) md += " " + scoring::metric_heading(m, false) + " |";
  md += " KV B/token |\n|---|---:|";
  for (size_t k = 0; k < scoring::kMetricCount; ++k) md += "---:|";
  md += "---:|\n";
  for (const ConfigStats& c : a.configs) {
    md += fmt::format("| {}{} | {} |", c.label, c.role == results::ConfigRole::reference ? " (ref)" : "", num(c.bits));
    for (const scoring::MetricInfo& m : scoring::kMetrics) md += " " + metric_cell(m, c.quality, c.latency, a.gold) + " |";
    md += " " + num(c.kv_bytes, 6) + " |\n";
  }
  std::vector<ConfigName> names;
  for (const ConfigStats& c : a.configs) names.push_back({c.label, c.spec});
  if (const std::string legend = canonical_legend(names); !legend.empty()) md += "\nConfigs as typed; " + legend + ".\n";
  if (!a.gold.note().empty()) md += "\nNote: " + a.gold.note() + ".\n";
  if (!in.weights_kv.empty()) md += "\n" + weights_kv_markdown(in.weights_kv, in.budget);
  md += "\n**Per domain (mean KLD)**\n\n| domain |";
  const auto cands = candidates(a);
  for (const ConfigStats* c : cands) md += " " + c->label + " |";
  md += "\n|---|";
  for (size_t k = 0; k < cands.size(); ++k) md += "---:|";
  md += "\n";
  for (const std::string& d : a.domains) {
    md += "| " + d + " |";
    for (const ConfigStats* c : cands) {
      const auto it = a.by_domain.find({d, c->spec});
      std::string cell = it == a.by_domain.end() ? "-" : num(it->second.quality.kld_mean);
      if (it != a.by_domain.end() && std::isfinite(it->second.baseline_kld_mean))
        cell += fmt::format(" ({:+.3g})", it->second.quality.kld_mean - it->second.baseline_kld_mean);
      md += " " + cell + " |";
    }
    md += "\n";
  }
  md += positions_markdown(a.positions);
  md += depth_accuracy_markdown(a.depth_accuracy);
  md += engine_markdown(in.engine) + cross_check_markdown(a, in.engine);
  md += changed_answers_markdown(in);
  if (in.baseline && !a.moved.empty()) {
    md += "\n**Items that moved most** (mean KLD, baseline → candidate)\n\n";
    for (const MovedItem& m : a.moved)
      md += fmt::format("- `{}` ({}, {}): {} → {} ({:+.4g})\n", m.item_key, m.domain, a.label(m.spec), num(m.baseline),
                        num(m.candidate), m.candidate - m.baseline);
  }
  return md;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t' ? ' ' : ch;
    }
  }
  return out;
}

}  // namespace kvgate::harness
