// Core value types that travel through queued signals. Every header whose signals carry them
// includes this first, so the declarations precede any use moc makes of them.
#pragma once

#include <QMetaType>

#include "train/run_config.h"
#include "train/step_metrics.h"

Q_DECLARE_METATYPE(rematlab::StepMetrics)
Q_DECLARE_METATYPE(rematlab::RunConfig)
