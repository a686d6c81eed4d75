#pragma once
// Line diffs in unified format (GNU diff / git conventions: 3 lines of context, "@@ -a,b +c,d @@"
// headers, ",1" omitted, an empty side's start is the line before it).
#include <string>
#include <vector>

namespace kvgate::evalsets {

std::vector<std::string> split_lines(const std::string& text);  // text ends with '\n' or not; no terminators kept

// Hunks only ("@@ ..." onwards), each line terminated by '\n'; empty when the files are equal.
std::string unified_hunks(const std::vector<std::string>& old_lines, const std::vector<std::string>& new_lines,
                          int context = 3);

}  // namespace kvgate::evalsets
