// SHA-256 digests of files and model paths, for pinning a served model to the exact bytes it was
// tested with (kvasir.toml's `sha256 = "..."`, server/serve_config.h).
//
// Every digest is 64 lowercase hex characters. Files are streamed in 4 MiB chunks through
// OpenSSL's EVP interface (a multi-GiB GGUF is never held in memory).
//
// The digest of a model path (sha256_model_path):
//  - a file (a GGUF): the file's SHA-256, what `sha256sum FILE` prints;
//  - a folder (a Hugging Face checkpoint): the SHA-256 of a manifest, the `sha256sum` lines of the
//    folder's files that define the model, in byte order of their names. The files that count
//    are the regular files (symbolic links followed, as in a Hugging Face cache snapshot)
//    directly in the folder (subfolders are not read) whose name does not start with '.' and
//    either ends in ".safetensors", ".json" or ".jinja" or is "tokenizer.model". Each gives
//    the line "<sha256 of the file>  <file name>\n" (two spaces, as sha256sum writes it), and
//    the digest is the SHA-256 of all the lines concatenated. So, in the folder:
//
//      ls -1 | grep -E '\.(safetensors|json|jinja)$|^tokenizer\.model$' | LC_ALL=C sort |
//        xargs -d '\n' sha256sum -- | sha256sum
//
//    prints the same digest. A folder with none of those files, or with such a file whose name
//    holds a newline or a backslash (which sha256sum would escape), is an error.
// Errors (a missing or unreadable file, a read error) throw kvasir::Error naming the file.
#pragma once

#include <string>
#include <string_view>

namespace kvasir {

// SHA-256 of a byte string, as 64 lowercase hex characters.
std::string sha256_hex(std::string_view bytes);

// SHA-256 of a file's contents.
std::string sha256_file(const std::string& path);

// A model path's digest: a file's SHA-256, or a folder's manifest digest (above).
std::string sha256_model_path(const std::string& path);

// Whether `s` is 64 hex characters (either case): the shape of a digest.
bool is_sha256_hex(std::string_view s);

}  // namespace kvasir
