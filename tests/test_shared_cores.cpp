// sim/shared_cores: the booking of net-lane charges on the cores that several nodes share.

#include <gtest/gtest.h>

#include "sim/shared_cores.hpp"

using pstwin::sim::SharedCores;

TEST(SharedCores, OneCoreRunsChargesOneAfterAnother) {
  SharedCores cores(1);
  EXPECT_DOUBLE_EQ(cores.book(0, 0, 2), 0);
  EXPECT_DOUBLE_EQ(cores.book(0, 0, 3), 2);  // waits for the first
  EXPECT_DOUBLE_EQ(cores.book(0, 1, 1), 5);  // and for the second
  EXPECT_DOUBLE_EQ(cores.book(0, 9, 1), 9);  // a free core starts at once
}

TEST(SharedCores, TwoCoresRunTwoChargesSideBySide) {
  SharedCores cores(2);
  EXPECT_DOUBLE_EQ(cores.book(0, 0, 2), 0);
  EXPECT_DOUBLE_EQ(cores.book(0, 0, 2), 0);
  EXPECT_DOUBLE_EQ(cores.book(0, 0, 2), 2);  // the third waits for the first core to free
  EXPECT_DOUBLE_EQ(cores.book(0, 1, 4), 2);
}

TEST(SharedCores, AGapBeforeALaterBookingIsFilled) {
  SharedCores cores(1);
  EXPECT_DOUBLE_EQ(cores.book(0, 10, 5), 10);  // booked ahead: [10, 15)
  EXPECT_DOUBLE_EQ(cores.book(0, 0, 4), 0);    // fits before it: [0, 4)
  EXPECT_DOUBLE_EQ(cores.book(0, 3, 7), 15);   // [4, 10) is too short for 7: after [10, 15)
  EXPECT_DOUBLE_EQ(cores.book(0, 2, 5), 4);    // [4, 9) fits in [4, 10)
  EXPECT_DOUBLE_EQ(cores.book(0, 0, 2), 22);   // no gap of 2 is left before [15, 22)
  EXPECT_DOUBLE_EQ(cores.book(0, 0, 1), 9);    // [9, 10) is
}

TEST(SharedCores, BookingsThatEndedAreForgotten) {
  SharedCores cores(1);
  EXPECT_DOUBLE_EQ(cores.book(0, 0, 1), 0);
  EXPECT_DOUBLE_EQ(cores.book(5, 5, 1), 5);
  EXPECT_DOUBLE_EQ(cores.book(7, 7, 1), 7);
  EXPECT_DOUBLE_EQ(cores.book(7, 5, 1), 5);  // `earliest` before now: what ended is not in the way
}
