// Sherman's Common.h names Boost's symmetric coroutines for its clients; the index cache needs none.
#pragma once
namespace boost { namespace coroutines {
template <class T> struct symmetric_coroutine { struct yield_type {}; struct call_type {}; };
}}
