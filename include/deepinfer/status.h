// Public Status / Result<T>: how expected failures (bad requests, bad model directories, overload) reach
// users of the in-process API. It is the library's one Status type (src/core/status.h), re-exported here so
// that code outside the library (server, CLI, Python module) includes only include/deepinfer/.
// Invariant: a failed Status carries a message that names the field or thing that is wrong.
#pragma once

#include "core/status.h"  // IWYU pragma: export
