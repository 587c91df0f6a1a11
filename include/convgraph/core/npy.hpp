#pragma once
/// Saving and loading tensors in NumPy's formats, so Python reads what C++ wrote and back:
/// `.npy` (one array) and `.npz` (a zip of named .npy files, as np.savez writes).
///
///   save_npy("w.npy", w);                   // np.load("w.npy")
///   save_npz("params.npz", {{"w", w}, {"b", b}});  // np.load("params.npz")["w"]
///   save_shared("model.npz", {w1, b1});      // shared variables, by name
///   load_shared("model.npz", {w1, b1});
///
/// Written: .npy format 1.0, C order, little-endian; .npz entries stored (no compression).
/// Read: .npy formats 1.0 to 3.0; .npz entries stored or deflated (np.savez_compressed),
/// CRC-checked. dtypes: float16 '<f2', float32 '<f4', float64 '<f8', int32 '<i4',
/// int64 '<i8', bool '|b1'; bfloat16, which NumPy lacks, is written as the structured
/// dtype [('bfloat16', '<u2')] holding the raw bits (Python: a['bfloat16']) and read back
/// as bfloat16.
///
/// A file that is not what it should be is an error, never a crash and never a huge
/// allocation: ValueError for a missing/unreadable file, a bad magic, a malformed header,
/// Fortran order, big-endian data, a truncated file or entry, a bad zip or a CRC
/// mismatch; TypeError for a dtype convgraph does not have ('<c8', '<u1', objects...);
/// ShapeError for a negative or overflowing shape. Messages name the file, the entry
/// and the values.
#include <map>
#include <string>
#include <vector>

#include "convgraph/core/shared.hpp"
#include "convgraph/core/tensor.hpp"

namespace convgraph {

/// Writes `t` (a host tensor of any layout; written in C order) to `path`.
void save_npy(const std::string& path, const Tensor& t);
/// Reads a .npy file into a new contiguous host tensor.
Tensor load_npy(const std::string& path);

/// Writes named arrays as a .npz (entry "<name>.npy" each). Names must be non-empty.
void save_npz(const std::string& path, const std::map<std::string, Tensor>& arrays);
/// Reads every array of a .npz, by name (the entry name without ".npy").
std::map<std::string, Tensor> load_npz(const std::string& path);

/// Saves the values of shared variables by name as a .npz. Every variable needs a name,
/// distinct from the others' (ValueError otherwise).
void save_shared(const std::string& path, const std::vector<SharedVar>& vars);
/// Sets each variable's value from the array of its name in a .npz. Checks everything
/// first and changes nothing on an error: a variable missing from the file (ValueError
/// listing the names there), or an array whose dtype or shape differs from the
/// variable's (TypeError/ShapeError naming both). Arrays of other names are ignored.
void load_shared(const std::string& path, const std::vector<SharedVar>& vars);

}  // namespace convgraph
