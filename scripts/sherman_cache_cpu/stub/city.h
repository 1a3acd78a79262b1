// CityHash is used by Sherman's pages only under CONFIG_ENABLE_CRC, which the harness leaves off.
#pragma once
#include <cstddef>
#include <cstdint>
uint32_t CityHash32(const char *buf, size_t len);
