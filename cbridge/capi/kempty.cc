// Out-of-line definitions of the in-class constants of ps::Node and
// ps::Meta, for consumer code that takes their address (binds them to a
// const reference); before C++17 that needs exactly one definition, which
// ps-lite's own library also provides.
// No <iostream>: its static initialiser would make libps depend on
// libstdc++ (libps.so is linked by the C compiler).
#define PS_BRIDGE_NO_IOSTREAM
#include "ps/internal/message.h"

const int ps::Node::kEmpty;
const int ps::Meta::kEmpty;
