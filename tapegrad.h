// tapegrad: everything a training script needs, one include.
#pragma once

#include "core/autograd.h"
#include "core/factory.h"
#include "core/memory.h"
#include "core/primitives.h"
#include "core/tensor.h"
#include "core/trace.h"
