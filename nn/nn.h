// Every nn layer and model.
#pragma once

#include "nn/attention.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/generation.h"
#include "nn/gpt2.h"
#include "nn/init.h"
#include "nn/kv_cache.h"
#include "nn/linear.h"
#include "nn/llama.h"
#include "nn/loss.h"
#include "nn/mlp.h"
#include "nn/module.h"
#include "nn/norm.h"
#include "nn/pretrained.h"
#include "nn/rotary.h"
