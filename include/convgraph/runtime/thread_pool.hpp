#pragma once
/// Moved to the core layer: include "convgraph/core/thread_pool.hpp".
#include "convgraph/core/thread_pool.hpp"
