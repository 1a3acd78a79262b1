// Sherman's DSM (the RDMA memory pool); the index cache and the pages it holds need only its
// global addresses.
#pragma once
#include "GlobalAddress.h"
class DSM;
