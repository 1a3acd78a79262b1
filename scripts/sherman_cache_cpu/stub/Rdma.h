// Sherman's Rdma.h wraps ibverbs; nothing of it is used by the index cache (its standard headers
// are, by the files that include it).
#pragma once
#include <cassert>
#include <cstring>
#include <iostream>
#include <list>
#include <string>
