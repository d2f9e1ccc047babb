// Python bindings of the manifest (pybind11): Manifest, the rows the planner reads, and
// musubi_text_file, the naming rule of a musubi-tuner latent cache (manifest/cache_folder.h).
// Split from planner_py.cpp; module.cpp registers it before the planner (Planner and
// apply_duplicate_policy take a Manifest).
#include <torch/extension.h>

#include <string>
#include <vector>

#include "adaptiveload/manifest/cache_folder.h"
#include "adaptiveload/manifest/manifest.h"

namespace adaptiveload {
namespace py {
namespace pb = pybind11;

namespace {

BadRowPolicy bad_row_policy(bool skip) { return skip ? BadRowPolicy::kSkip : BadRowPolicy::kError; }

int64_t checked_row(const Manifest& m, int64_t row) {
  if (row < 0 || row >= m.total_rows())
    throw pb::index_error("row " + std::to_string(row) + " out of range (the manifest has " +
                          std::to_string(m.total_rows()) + " rows)");
  return row;
}

}  // namespace

void bind_manifest(pb::module_& m) {
  m.def(
      "musubi_text_file",
      [](const std::string& latent_path) {
        const size_t slash = latent_path.rfind('/');
        const std::string dir = slash == std::string::npos ? "" : latent_path.substr(0, slash + 1);
        MusubiName n;
        if (!parse_musubi_name(latent_path.substr(dir.size()), n))
          throw std::invalid_argument(latent_path + " is not a musubi-tuner latent file name " +
                                      "(<key>_<W>x<H>_<arch>.safetensors)");
        return dir + n.item_key + "_" + n.arch + "_te.safetensors";
      },
      pb::arg("latent_path"),
      "The text-encoder output file of a musubi-tuner latent file (manifest/cache_folder.h).");
  pb::class_<Manifest>(m, "Manifest")
      .def(pb::init<>())
      .def(
          "load",
          [](Manifest& self, const std::string& path, bool skip) {
            self.load(path, bad_row_policy(skip));
          },
          pb::arg("path"), pb::arg("skip_bad_rows") = false,
          "Appends the rows of a CSV or JSONL file.")
      .def(
          "add_rows",
          [](Manifest& self, const std::vector<std::string>& path,
             const std::vector<std::string>& num_frames, const std::vector<std::string>& height,
             const std::vector<std::string>& width, const std::vector<std::string>& fps,
             const std::string& source, bool skip, const std::vector<std::string>& caption) {
            const size_t n = path.size();
            if (num_frames.size() != n || height.size() != n || width.size() != n ||
                fps.size() != n || (!caption.empty() && caption.size() != n))
              throw std::invalid_argument("add_rows: columns have different lengths");
            for (size_t i = 0; i < n; ++i)
              self.add_row(path[i], num_frames[i], height[i], width[i], fps[i], source, int64_t(i),
                           bad_row_policy(skip), caption.empty() ? std::string() : caption[i]);
          },
          pb::arg("path"), pb::arg("num_frames"), pb::arg("height"), pb::arg("width"),
          pb::arg("fps"), pb::arg("source"), pb::arg("skip_bad_rows") = false,
          pb::arg("caption") = std::vector<std::string>{},
          "Appends rows given as string columns (empty fps = image); `source` names them in "
          "errors, "
          "the 'line' of a row is its 0-based index.")
      .def_property_readonly("total_rows", &Manifest::total_rows)
      .def(
          "path",
          [](const Manifest& self, int64_t row) {
            return std::string(self.path(checked_row(self, row)));
          },
          pb::arg("row"), "The row's path as the manifest gives it.")
      .def(
          "caption",
          [](const Manifest& self, int64_t row) {
            return std::string(self.caption(checked_row(self, row)));
          },
          pb::arg("row"),
          "The row's caption (its `caption` or `text` column), '' when it has none.")
      .def_property_readonly("has_captions", &Manifest::has_captions)
      .def(
          "clip",
          [](const Manifest& self, int64_t row) {
            const ClipInfo c = self.clip(checked_row(self, row));
            return pb::make_tuple(c.num_frames, c.height, c.width, c.fps);
          },
          pb::arg("row"),
          "(num_frames, height, width, fps) of the row (zeros for a bad row; fps 0 for an image).")
      .def(
          "where",
          [](const Manifest& self, int64_t row) { return self.where(checked_row(self, row)); },
          pb::arg("row"), "'file:line' of the row, for messages.")
      .def("usable",
           [](const Manifest& self, int64_t row) {
             if (row < 0 || row >= self.total_rows()) throw pb::index_error("row out of range");
             return self.usable(row);
           })
      .def(
          "fixed",
          [](const Manifest& self, int64_t row) {
            if (row < 0 || row >= self.total_rows()) throw pb::index_error("row out of range");
            return self.fixed(row);
          },
          pb::arg("row"), "Whether the row is a latent cache's (its shape is its bucket).")
      .def(
          "row_path",
          [](const Manifest& self, int64_t row) {
            if (row < 0 || row >= self.total_rows()) throw pb::index_error("row out of range");
            return std::string(self.path(row));
          },
          pb::arg("row"), "The row's path as its manifest gives it.")
      .def_property_readonly("bad_rows", [](const Manifest& self) {
        std::vector<std::string> out;
        for (const BadRow& b : self.bad_rows()) out.push_back(b.message());
        return out;
      });
}

}  // namespace py
}  // namespace adaptiveload
